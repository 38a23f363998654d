"""Key values for reading ranges and single keys: canonical key values (see
``canonical``) back to plain Python values (each sink's reader turns them into what its
queries take: ``merger.verify.sinks``), what the source's query takes, and an order in
which the sinks' ranges are cut. Pure.

Only keys pass through here; the values compared are always canonicalised from what each
side returned. A wrong conversion here can put a row into another chunk or make a
lookup miss it, which shows as a difference, never as a false "equal".
"""

from __future__ import annotations

import datetime as _dt
from decimal import Decimal
from typing import Any

from cdc.errors import CdcError

_UTC = _dt.timezone.utc
# MariaDB orders these key types as the sinks do (numbers, instants, bytes); strings
# follow a collation (case-insensitive, PAD SPACE), so their chunks can disagree
ALIGNED_KINDS = ("int", "bool", "decimal", "float", "date", "datetime", "timestamp", "time", "binary", "bit")


class UnsupportedKey(CdcError, ValueError):
    pass


def key_kind(kind: str) -> str:
    if kind in ("json", "geometry"):
        raise UnsupportedKey(f"a {kind} column cannot be a key for verify")
    return kind


def time_micros(text: str) -> int:
    neg = text.startswith("-")
    h, m, rest = text.lstrip("-").split(":")
    s, _, us = rest.partition(".")
    micros = ((int(h) * 60 + int(m)) * 60 + int(s)) * 1_000_000 + int((us + "000000")[:6])
    return -micros if neg else micros


def python_value(kind: str, canon: str) -> Any:
    """A canonical key value as a plain Python value of its type."""
    if not isinstance(canon, str):
        raise UnsupportedKey(f"key value {canon!r} has no canonical form")
    if kind == "int":
        return int(canon)
    if kind == "bool":
        return canon == "true"
    if kind == "decimal":
        return Decimal(canon)
    if kind == "float":
        return float(canon)
    if kind == "string":
        return canon
    if kind in ("binary", "bit"):
        return bytes.fromhex(canon[2:])
    if kind == "date":
        return _dt.date.fromisoformat(canon)
    if kind == "datetime":
        return _dt.datetime.fromisoformat(canon)
    if kind == "timestamp":
        return _dt.datetime.fromisoformat(canon[:-1]).replace(tzinfo=_UTC)
    if kind == "time":
        return _dt.timedelta(microseconds=time_micros(canon))
    raise UnsupportedKey(f"a {kind} column cannot be a key for verify")


def order_key(kinds: list[str], canon: tuple) -> tuple:
    """Canonical key -> a tuple whose Python order is the sinks' order of the key (numbers
    by value, strings by code point = UTF-8 bytes = PostgreSQL's "C" collation = Arrow)."""
    return tuple(python_value(k, c) for k, c in zip(kinds, canon))


def source_value(kind: str, canon: str) -> Any:
    """A canonical key value as ``merger.snapshot.chunking.sql_literal`` writes it for the source
    (the session runs in UTC)."""
    v = python_value(kind, canon)
    if kind == "timestamp":
        return v.replace(tzinfo=None)
    if kind == "time":
        return canon
    if kind == "bool":
        return 1 if v else 0
    return v
