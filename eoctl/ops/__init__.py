"""The commands that change things (gc, replay): plan with Spark, change in small guarded batches."""
