"""The PostgreSQL sink (``sink.py`` says what it writes and how)."""

from merger.sinks.postgres.sink import PgSettings, PostgresSink

__all__ = ["PgSettings", "PostgresSink"]
