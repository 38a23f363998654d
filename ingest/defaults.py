"""A column's DEFAULT text turned into the value mysql-replication would decode for it, as
Debezium's default value converter does; the column's converter then makes the schema
"default" and the NOT NULL substitute out of it (``ingest.columncodec``). Pure."""

from __future__ import annotations

import base64
import datetime as _dt
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any

from cdc.tablespec import BINARY_TYPES, GEOMETRY_TYPES, INTEGER_TYPES, STRING_TYPES, ColumnSpec

if TYPE_CHECKING:
    from ingest.converter_config import ConverterConfig

_EPOCH_DT = _dt.datetime(1970, 1, 1)


class JsonDefault:
    """A default already in JSON-model form (bypasses the column converter)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_CURRENT_TS = re.compile(r"^(current_timestamp|now|localtime|localtimestamp)\s*(\(\s*\d*\s*\))?$", re.I)


def raw_default(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Any:
    """The column's DEFAULT turned into what mysql-replication would decode for it, as
    Debezium's default value converter does (None: no usable default)."""
    text = col.default
    if text is None:
        return None
    s = text.strip() if t not in STRING_TYPES and t not in ("enum", "set", "json") else text
    m = re.match(r"^_[A-Za-z0-9]+'(.*)'$", s)  # charset introducer
    if m:
        s = m.group(1)
    try:
        if t in INTEGER_TYPES or t in ("serial", "year"):
            if s.lower() in ("true", "false"):
                return 1 if s.lower() == "true" else 0
            if t == "year":
                return int(s)
            return int(s) if re.fullmatch(r"[-+]?\d+", s) else int(round(float(s)))
        if t == "boolean":
            if s.lower() in ("true", "false"):
                return s.lower() == "true"
            return int(s) != 0
        if t in ("decimal", "numeric"):
            if s.lower() in ("true", "false"):
                s = "1" if s.lower() == "true" else "0"
            d = Decimal(s)
            if col.scale is not None:
                d = d.quantize(Decimal(1).scaleb(-col.scale), rounding=ROUND_HALF_UP)
            return d
        if t in ("float", "double", "real"):
            return float(s)
        if t == "bit":
            bm = re.fullmatch(r"[bB]'([01]*)'", s)
            if bm:
                return int(bm.group(1) or "0", 2)
            if (col.length or 1) <= 1:
                return 1 if s.lower() == "true" else (0 if s.lower() == "false" else int(s))
            return int(s, 2) if re.fullmatch(r"[01]+", s) else int(s)
        if t == "date":
            dt = _parse_datetime_text(s)
            if dt is None:
                return None if col.nullable else _dt.date(1970, 1, 1)
            return dt.date()
        if t == "datetime":
            if _CURRENT_TS.match(s):
                return None if col.nullable else _EPOCH_DT
            dt = _parse_datetime_text(s)
            if dt is None:
                return None if col.nullable else _EPOCH_DT
            return dt
        if t == "timestamp":
            if _CURRENT_TS.match(s):
                return None if col.nullable else JsonDefault("1970-01-01T00:00:00Z")
            dt = _parse_datetime_text(s)
            if dt is None or dt == _EPOCH_DT:
                return None if col.nullable else JsonDefault("1970-01-01T00:00:00Z")
            # Debezium reads it in the JVM's zone; deployments run the JVM in UTC
            return dt
        if t == "time":
            tm = re.match(r"^\d+-\d+-\d+ (.*)$", s)
            return _mysql_time_str_to_td(tm.group(1) if tm else s)
        if t in BINARY_TYPES:
            if cfg.binary_handling_mode in ("bytes", "base64"):
                return JsonDefault(base64.b64encode(s.encode("utf-8")).decode("ascii"))
            return s.encode("utf-8")
        if t in GEOMETRY_TYPES:
            return None
        return s  # strings, enum, set, json
    except (ValueError, ArithmeticError):
        return None


def _mysql_time_str_to_td(s: str) -> _dt.timedelta:
    neg = s.startswith("-")
    s = s.lstrip("-").strip()
    if " " in s:  # 'D HH:MM:SS'
        days, s = s.split(" ", 1)
        extra_h = int(days) * 24
    else:
        extra_h = 0
    parts = s.split(":")
    h = int(parts[0]) + extra_h
    m = int(parts[1]) if len(parts) > 1 else 0
    sec_s = parts[2] if len(parts) > 2 else "0"
    if "." in sec_s:
        sec, frac = sec_s.split(".")
        us = int((frac + "000000")[:6])
    else:
        sec, us = sec_s, 0
    td = _dt.timedelta(hours=h, minutes=m, seconds=int(sec), microseconds=us)
    return -td if neg else td


def _parse_datetime_text(s: str) -> _dt.datetime | None:
    s = s.strip()
    m = re.match(r"^(\d+)-(\d+)-(\d+)(?:[ T](\d+)(?::(\d+)(?::(\d+)(?:\.(\d+))?)?)?)?$", s)
    if not m:
        return None
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if y == 0 or mo == 0 or d == 0:
        return None
    hh, mm, ss = int(m.group(4) or 0), int(m.group(5) or 0), int(m.group(6) or 0)
    us = int(((m.group(7) or "") + "000000")[:6])
    try:
        return _dt.datetime(y, mo, d, hh, mm, ss, us)
    except ValueError:
        return None
