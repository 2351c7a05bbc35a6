"""The commands that change things (reconcile-tokens, gc-tokens, gc-blobs, replay-outbox,
abort-transaction): a plan over the engine's run (eoctl.engine.run), then changes in small guarded
batches under a lease, journaled, restorable."""
