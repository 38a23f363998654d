"""The kinds of source the merger reads: what wrote the topics (``source_connector``)."""
