"""The changelog's records: Arrow columns to Debezium JSON keys and values, the headers,
and the values decoded back to Arrow (for reads)."""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
import time

import pyarrow as pa
import pyarrow.compute as pc

from cdc.wire.partitioner import partition_for
from merger.sinks import types as T
from merger.sinks.base import DELETE_OP, OP, SEQ, TableId
from merger.sinks.kafka_changelog.state import TableState

SEQ_HEADER, VERSION_HEADER = "cdc.seq", "cdc.version"
TRUNCATE_HEADER = "cdc.truncate"
dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class ChangelogCodec:
    """The encodings of one sink: its topic prefix names the synthesized ``source`` blocks;
    ``decimal_handling`` is precise, string or double."""

    def __init__(self, prefix: str, decimal_handling: str):
        self.prefix = prefix
        self.decimal_handling = decimal_handling

    def records(self, st: TableState, src: pa.Table, version: int) -> list:
        if src.num_rows == 0:
            return []
        cols = [c for c in src.column_names if c in st.columns]
        # a BIT(n>1) column: known from ensure_table, or from the batch's field metadata
        enc = {
            c: self.encoded_column(src[c], st.columns[c], st.bits.get(c) or T.bit_width(src.schema.field(c)))
            for c in cols
        }
        key_parts = [(dumps(k) + ":", enc[k]) for k in st.keys]
        seqs = src[SEQ].to_pylist()
        ops = src[OP].to_pylist()
        sources = src["_cdc_source"].to_pylist() if "_cdc_source" in src.column_names else None
        ts = src["_cdc_ts_ms"].to_pylist() if "_cdc_ts_ms" in src.column_names else None
        now = int(time.time() * 1000)
        own_source = {op: dumps(self.source(st.table, op, now)) for op in ("c", "u", "r", "d")}
        vbytes = str(version).encode()
        n_parts = st.partitions
        out = []
        held = st.seqs
        for i, (seq, op) in enumerate(zip(seqs, ops)):
            key = ("{" + ",".join(name + _scalar(values[i]) for name, values in key_parts) + "}").encode()
            h = held.get(key)
            if h is not None and h >= seq:
                continue
            row = dumps({c: enc[c][i] for c in cols})
            source = sources[i] if sources is not None and sources[i] else own_source[op]
            ts_ms = ts[i] if ts is not None and ts[i] is not None else now
            if op == DELETE_OP:
                value = f'{{"before":{row},"after":null,"source":{source},"op":"d","ts_ms":{ts_ms},"transaction":null}}'
            else:
                value = (
                    f'{{"before":null,"after":{row},"source":{source},"op":"{op}","ts_ms":{ts_ms},"transaction":null}}'
                )
            out.append(
                (
                    key,
                    value.encode(),
                    partition_for(key, n_parts),
                    [(SEQ_HEADER, str(seq).encode()), (VERSION_HEADER, vbytes)],
                    op == DELETE_OP,
                )
            )
        return out

    def source(self, table: TableId, op: str, now: int) -> dict:
        return {
            "version": "cdc-merger",
            "connector": "mysql",
            "name": self.prefix,
            "ts_ms": now,
            "snapshot": "true" if op == "r" else "false",
            "db": table.database,
            "sequence": None,
            "table": table.table,
            "server_id": 0,
            "gtid": None,
            "file": "",
            "pos": 0,
            "row": 0,
            "thread": None,
            "query": None,
        }

    def encoded_column(self, col: pa.ChunkedArray, storage: pa.DataType, bit_width: int | None = None) -> list:
        typ = col.type
        if isinstance(typ, pa.BaseExtensionType):
            col = pa.chunked_array([c.storage for c in col.chunks], type=typ.storage_type)
            typ = col.type
        if pa.types.is_dictionary(typ):
            col = pc.cast(col, typ.value_type)
            typ = col.type
        if pa.types.is_date(storage):
            return pc.cast(pc.cast(col, pa.date32()), pa.int32()).to_pylist()
        if pa.types.is_timestamp(storage):
            micros = pc.cast(pc.cast(col, pa.timestamp("us", tz=typ.tz)), pa.int64()).to_pylist()
            if storage.tz is None:
                return micros
            return [None if v is None else _zoned(v) for v in micros]
        if pa.types.is_time(storage):
            return pc.cast(pc.cast(col, pa.time64("us")), pa.int64()).to_pylist()
        if pa.types.is_duration(storage):
            return pc.cast(pc.cast(col, pa.duration("us")), pa.int64()).to_pylist()
        if pa.types.is_binary(storage) and bit_width:
            width = (bit_width + 7) // 8  # big-endian -> Debezium's little-endian
            return [
                None if v is None else base64.b64encode(int.from_bytes(v, "big").to_bytes(width, "little")).decode()
                for v in pc.cast(col, pa.binary()).to_pylist()
            ]
        if pa.types.is_binary(storage):
            return [None if v is None else base64.b64encode(v).decode() for v in pc.cast(col, pa.binary()).to_pylist()]
        if pa.types.is_decimal(storage):
            values = pc.cast(col, storage).to_pylist()
            if self.decimal_handling == "string":
                return [None if v is None else str(v) for v in values]
            if self.decimal_handling == "double":
                return [None if v is None else float(v) for v in values]
            scale = storage.scale
            return [None if v is None else _unscaled_b64(v, scale) for v in values]
        if pa.types.is_floating(storage):
            return [_float(v) for v in col.to_pylist()]
        return pc.cast(col, storage).to_pylist() if not T.is_json(storage) else pc.cast(col, pa.string()).to_pylist()

    def decoded_column(self, values: list, storage: pa.DataType, bit_width: int | None = None) -> pa.Array:
        if pa.types.is_date(storage):
            return pc.cast(pa.array(values, pa.int32()), pa.date32())
        if pa.types.is_timestamp(storage):
            if storage.tz is None:
                return pc.cast(pa.array(values, pa.int64()), storage)
            return pa.array(
                [None if v is None else _dt.datetime.fromisoformat(v.replace("Z", "+00:00")) for v in values], storage
            )
        if pa.types.is_time(storage) or pa.types.is_duration(storage):
            return pc.cast(pa.array(values, pa.int64()), storage)
        if pa.types.is_binary(storage) and bit_width:
            width = (bit_width + 7) // 8  # Debezium's little-endian -> big-endian, as the other sinks
            return pa.array(
                [
                    None if v is None else int.from_bytes(base64.b64decode(v), "little").to_bytes(width, "big")
                    for v in values
                ],
                pa.binary(),
            )
        if pa.types.is_binary(storage):
            return pa.array([None if v is None else base64.b64decode(v) for v in values], pa.binary())
        if pa.types.is_decimal(storage):
            import decimal

            if self.decimal_handling == "precise":
                values = [
                    None
                    if v is None
                    else decimal.Decimal(int.from_bytes(base64.b64decode(v), "big", signed=True)).scaleb(-storage.scale)
                    for v in values
                ]
            else:
                values = [None if v is None else decimal.Decimal(str(v)) for v in values]
            return pa.array(values, storage)
        if pa.types.is_floating(storage):
            special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
            return pa.array([special.get(v, v) if isinstance(v, str) else v for v in values], storage)
        if T.is_json(storage):
            return pa.array(values, pa.string())
        return pa.array(values, storage)


def _scalar(v) -> str:
    """JSON text of one scalar (fast path for ints)."""
    return str(v) if type(v) is int else dumps(v)


def _zoned(micros: int) -> str:
    ts = _dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=micros)
    text = ts.strftime("%Y-%m-%dT%H:%M:%S")
    if ts.microsecond:
        text += ("." + f"{ts.microsecond:06d}").rstrip("0")
    return text + "Z"


def _unscaled_b64(value, scale: int) -> str:
    unscaled = int(value.scaleb(scale))
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def _float(v):
    if v is None or not isinstance(v, float) or math.isfinite(v):
        return v
    if math.isnan(v):
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"
