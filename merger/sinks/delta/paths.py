"""Where a Delta sink keeps a table, from its base path alone (pure: also what ``cdc
verify`` reads, merger/verify/sinks/delta.py).

Path components are the names verbatim, except that ``/``, ``\\``, NUL, ``%``, ``~`` and
the names ``.``/``..`` are written ``~`` + two hex digits (``a/b`` -> ``a~2Fb``): delta-rs
decodes ``%XX`` in local paths on read but not on write, so a ``%`` must never reach a path.
The database name ``_cdc`` is reserved (the sink's own tables: tombstones, writer claims).
"""

from __future__ import annotations

from merger.sinks.base import SinkError, as_table_id

RESERVED_DB = "_cdc"

_PATH_ESCAPED = "~%/\\\x00"


def component(name: str) -> str:
    """A database or table name as one path component (see the module notes)."""
    if not name:
        raise SinkError("empty database or table name")
    if name in (".", ".."):
        return "~2E" * len(name)
    return "".join(f"~{ord(ch):02X}" if ch in _PATH_ESCAPED else ch for ch in name)


def table_path(base: str, table) -> str:
    """The user-visible table ``<base>/<db>/<table>`` (a latest state, change log or history)."""
    table = as_table_id(table)
    if table.database == RESERVED_DB:
        raise SinkError(f"database name {RESERVED_DB!r} is reserved by the Delta sink")
    return f"{base}/{component(table.database)}/{component(table.table)}"


def tombstone_path(base: str, table) -> str:
    """A latest-state table's deleted keys, ``<base>/_cdc/tombstones/<db>/<table>``."""
    table = as_table_id(table)
    return f"{base}/{RESERVED_DB}/tombstones/{component(table.database)}/{component(table.table)}"
