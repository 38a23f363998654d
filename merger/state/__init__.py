"""The merger's durable state under ``state_dir`` (``store``) and its per-batch chain of
full states and deltas (``chain``, pure). Imports ``cdc`` and ``merger.errors`` only."""
