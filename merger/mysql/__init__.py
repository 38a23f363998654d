"""The merger's access to the source server: connections with retries (``source``) and the
start-up checks of its user (``checks``). Imports ``cdc``, ``merger.errors`` and
``merger.sources`` (which watermark rights a kind of source needs)."""
