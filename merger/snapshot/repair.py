"""Repair plans (``cdc repair``, ``cdc verify --repair``): key-list windows, pure Python.

A repair re-reads the keys a verify found different, missing or extra in a sink through
the DBLog window path (LOW, ``SELECT ... WHERE key IN (...)``, HIGH), never by writing to
the source (a write that changes nothing leaves no row event). Its chunks are key lists,
not ranges: each is read by one SELECT in its own window. At the emission, the rows read
are upserted like snapshot rows and the asked keys the SELECT did not return are deleted
(``merger.dblog.swept_keys``), so rows only a sink holds go too, which a re-read of the
source alone cannot do.
"""

from __future__ import annotations

import hashlib
import json
import time
from decimal import Decimal
from typing import Any, Sequence

import pyarrow as pa

from cdc.quoting import quote_ident
from merger.dblog import decode_key, encode_key

KEYS_PER_WINDOW = 500
REPAIRABLE_KINDS = ("int", "decimal", "string", "binary")  # verify's key kinds (merger.verify.keys)
# key values a repair can name exactly on both ends (SQL literal and Arrow value)
REPAIRABLE = (int, str, bytes, Decimal)


class RepairError(ValueError):
    """A repair that cannot be planned (the message says why and what to do)."""


def repair_plan(table: str, repair_id: str, keys: Sequence[tuple], per_window: int = KEYS_PER_WINDOW) -> dict:
    """The snapshot plan of a repair: chunks of at most ``per_window`` keys each (tuples
    of the key columns' source values), ``repair_id`` naming the request it answers."""
    keys = list(dict.fromkeys(tuple(k) for k in keys))
    if not keys:
        raise RepairError(f"repair of {table}: no keys to repair")
    for key in keys:
        for value in key:
            if not isinstance(value, REPAIRABLE) or isinstance(value, bool):
                raise RepairError(
                    f"repair of {table}: key value {value!r} is of a type repair cannot name exactly "
                    "(integer, decimal, string and binary keys only); `cdc snapshot` reads the table again"
                )
    chunks = []
    for i in range(0, len(keys), per_window):
        part = [encode_key(k) for k in keys[i : i + per_window]]
        digest = hashlib.sha256(json.dumps(part).encode()).hexdigest()[:16]
        chunks.append({"id": f"{table}:repair:{digest}", "lo": encode_key(None), "hi": encode_key(None), "keys": part})
    return {
        "table": table,
        "where": None,
        "created_at": time.time(),
        "rows": 0,
        "deleted": 0,
        "done": [],
        "chunks": chunks,
        "repair_id": repair_id,
    }


def is_key_list(chunk: dict) -> bool:
    return "keys" in chunk


def chunk_keys(chunk: dict) -> list[tuple]:
    return [tuple(decode_key(k)) for k in chunk.get("keys", [])]


def key_list_where(key_columns: Sequence[str], keys: Sequence[tuple]) -> tuple[str, list]:
    """``k IN (%s, ..)`` (one column) or ``(a, b) IN ((%s, %s), ..)`` with its values: the
    rows of exactly these keys, as the source's collation compares them. The values go as
    parameters (pymysql quotes them as the session's sql_mode reads them, server status
    NO_BACKSLASH_ESCAPES); a ``%`` of a column name is doubled for pymysql's formatting."""
    if not keys:
        return "FALSE", []

    def col(name: str) -> str:
        return quote_ident(name).replace("%", "%%")

    params = [bytes(v) if isinstance(v, (bytearray, memoryview)) else v for k in keys for v in k]
    if len(key_columns) == 1:
        return f"{col(key_columns[0])} IN ({', '.join('%s' for _ in keys)})", params
    cols = ", ".join(col(c) for c in key_columns)
    row = "(" + ", ".join("%s" for _ in key_columns) + ")"
    return f"({cols}) IN ({', '.join(row for _ in keys)})", params


def window_where(plan_where: str | None, chunks: list[dict], key_columns: Sequence[str]) -> tuple[str | None, list]:
    """The SELECT condition of a window and its parameters: a key-list chunk's keys (with the
    plan's condition, its ``%`` doubled); else the plan's condition as it is, no parameters."""
    if not chunks or not is_key_list(chunks[0]):
        return plan_where, []
    keys, params = key_list_where(key_columns, chunk_keys(chunks[0]))
    return (keys if not plan_where else f"({plan_where.replace('%', '%%')}) AND {keys}"), params


def asked_table(schema: pa.Schema, key_columns: Sequence[str], keys: Sequence[tuple]) -> pa.Table:
    """The asked keys as a table of the key columns in the sink's Arrow types (the type of a
    DECIMAL stored as text is a string)."""
    columns = {}
    for i, name in enumerate(key_columns):
        typ = schema.field(name).type
        values = [k[i] for k in keys]
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            values = [v if isinstance(v, str) else format(v, "f") if isinstance(v, Decimal) else str(v) for v in values]
        columns[name] = pa.array(values, typ)
    return pa.table(columns)


def deletes_table(schema: pa.Schema, gone: pa.Table) -> pa.Table:
    """Delete changes (key columns, ``_cdc_op``, ``_cdc_seq``) widened to every column of
    ``schema`` (nulls), as the sinks take a batch of changes."""
    n = gone.num_rows
    columns = {f.name: gone.column(f.name) if f.name in gone.column_names else pa.nulls(n, f.type) for f in schema}
    columns["_cdc_op"] = gone.column("_cdc_op")
    columns["_cdc_seq"] = gone.column("_cdc_seq")
    return pa.table(columns)


def differing_keys(result) -> list[tuple]:
    """The keys a verify result (``merger.verify.chunked.TableResult``) lists as missing,
    extra or different, as the source's values; RepairError when its key kinds cannot be
    named exactly."""
    keys = [*result.missing, *result.extra, *(k for k, _ in result.different)]
    if not keys:
        return []
    odd = [k for k in result.key_kinds if k not in REPAIRABLE_KINDS]
    if odd or not result.key_kinds:
        raise RepairError(
            f"keys of kind {', '.join(odd) or 'unknown'}: repair names integer, decimal, string and binary keys "
            f"only; `cdc snapshot {result.table}` reads the table again"
        )
    try:
        return [tuple(_source_key(kind, v) for kind, v in zip(result.key_kinds, key)) for key in keys]
    except ValueError as exc:
        raise RepairError(f"a key verify reported cannot be named: {exc}") from None


def _source_key(kind: str, value: Any) -> Any:
    """A key value verify reported (canonical text, or the value a side returned) as the
    source's value."""
    from merger.verify.keys import source_value

    if isinstance(value, str):
        return source_value(kind, value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return value
    raise ValueError(f"key value {value!r} has no source form")
