"""The commands that change things (reconcile-tokens, gc-tokens, gc-blobs, gc-outbox, replay-outbox,
abort-transaction): a plan over the engine's run (eoctl.engine.run; gc-outbox's plan is its store's
own query), then changes in small guarded batches under a lease, journaled, restorable."""
