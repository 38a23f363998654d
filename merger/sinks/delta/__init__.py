"""The Delta Lake sink (``sink.py`` says what it writes and how)."""

try:
    import deltalake  # noqa: F401
except ImportError as _exc:  # pragma: no cover
    raise ImportError("the Delta sink needs the deltalake package: pip install deltalake") from _exc

from merger.sinks.delta.sink import DeltaSink  # noqa: E402

__all__ = ["DeltaSink"]
