"""Sweeps: every duplicate in a month of evidence, chunk by chunk, resumable, with no UI.

`run` cuts the timeline into chunks and runs the engine over batches of them, `evidence` says
which rows a chunk and a saved group need beyond their window, `report` totals and links what
a sweep found. The sweep's tables are the store's (`twice.store.sweeps`)."""
