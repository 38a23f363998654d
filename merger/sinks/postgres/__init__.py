"""The PostgreSQL sink (``sink.py`` says what it writes and how)."""

try:
    import psycopg  # noqa: F401
except ImportError as _exc:  # pragma: no cover
    raise ImportError("the PostgreSQL sink needs psycopg 3: pip install 'psycopg[binary]'") from _exc

from merger.sinks.postgres.settings import PgSettings  # noqa: E402
from merger.sinks.postgres.sink import PostgresSink  # noqa: E402

__all__ = ["PgSettings", "PostgresSink"]
