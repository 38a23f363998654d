"""Debezium's transaction metadata records (BEGIN/END on the transaction topic, the per-
record transaction block's order), with Java HashMap iteration order where Debezium's
output depends on it."""

from __future__ import annotations

from typing import Mapping, Sequence

from ingest.envelope import (
    EnvelopeConfig,
    Record,
    named_field,
    primitive_schema,
    with_schema,
)
from ingest.jsontext import dumps, json_str


def java_string_hash(s: str) -> int:
    h = 0
    for unit in _utf16_units(s):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def _utf16_units(s: str) -> list[int]:
    b = s.encode("utf-16-be")
    return [int.from_bytes(b[i : i + 2], "big") for i in range(0, len(b), 2)]


def java_hashmap_order(keys: Sequence[str]) -> list[str]:
    """Iteration order of a ``java.util.HashMap<String, ?>`` filled with ``keys`` in this
    order (fresh map, default capacity 16, load factor 0.75). Debezium's END record lists
    data collections in this order."""
    cap = 16
    while len(keys) > cap * 0.75:
        cap *= 2

    def bucket(k: str) -> int:
        h = java_string_hash(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    indexed = sorted(enumerate(keys), key=lambda ik: (bucket(ik[1]), ik[0]))
    return [k for _, k in indexed]


class TransactionTracker:
    """Transaction metadata as Debezium's TransactionMonitor writes it (``provide.
    transaction.metadata=true``): call ``event(data_collection)`` for each data event to
    get its ``transaction`` block, ``begin``/``end`` for the BEGIN/END records. Debezium on
    MariaDB never produces these (no GTID); we do, with the MariaDB GTID as the id."""

    def __init__(self, cfg: EnvelopeConfig) -> None:
        self.cfg = cfg
        self.tx_id: str | None = None
        self.total = 0
        self.per_collection: dict[str, int] = {}

    def begin(self, tx_id: str, ts_ms: int) -> Record:
        self.tx_id, self.total, self.per_collection = tx_id, 0, {}
        return transaction_record(self.cfg, "BEGIN", tx_id, ts_ms)

    def event(self, data_collection: str) -> str:
        """The ``transaction`` block of the next data event of ``data_collection``
        ("db.table"); both counters are 1-based."""
        self.total += 1
        n = self.per_collection.get(data_collection, 0) + 1
        self.per_collection[data_collection] = n
        return transaction_block_json(self.tx_id or "", self.total, n)

    def end(self, ts_ms: int) -> Record:
        rec = transaction_record(self.cfg, "END", self.tx_id or "", ts_ms, self.total, self.per_collection)
        self.tx_id, self.total, self.per_collection = None, 0, {}
        return rec


def transaction_key_schema() -> dict:
    return {
        "type": "struct",
        "fields": [named_field(primitive_schema("string", False), "id")],
        "optional": False,
        "name": "io.debezium.connector.common.TransactionMetadataKey",
        "version": 1,
    }


def transaction_value_schema() -> dict:
    coll = {
        "type": "struct",
        "fields": [
            named_field(primitive_schema("string", False), "data_collection"),
            named_field(primitive_schema("int64", False), "event_count"),
        ],
        "optional": True,
        "name": "event.collection",
        "version": 1,
    }
    return {
        "type": "struct",
        "fields": [
            named_field(primitive_schema("string", False), "status"),
            named_field(primitive_schema("string", False), "id"),
            named_field(primitive_schema("int64", True), "event_count"),
            {"type": "array", "items": coll, "optional": True, "field": "data_collections"},
            named_field(primitive_schema("int64", False), "ts_ms"),
        ],
        "optional": False,
        "name": "io.debezium.connector.common.TransactionMetadataValue",
        "version": 1,
    }


def transaction_record(
    cfg: EnvelopeConfig,
    status: str,
    tx_id: str,
    ts_ms: int,
    event_count: int | None = None,
    per_collection: Mapping[str, int] | None = None,
) -> Record:
    """A BEGIN or END record for the ``<prefix>.transaction`` topic."""
    key = '{"id":' + json_str(tx_id) + "}"
    if status == "BEGIN":
        colls = "null"
        count = "null"
    else:
        order = java_hashmap_order(list((per_collection or {}).keys()))
        colls = (
            "["
            + ",".join(
                '{"data_collection":' + json_str(k) + ',"event_count":' + str(per_collection[k]) + "}" for k in order
            )
            + "]"
        )
        count = str(int(event_count or 0))
    value = (
        '{"status":'
        + json_str(status)
        + ',"id":'
        + json_str(tx_id)
        + ',"event_count":'
        + count
        + ',"data_collections":'
        + colls
        + ',"ts_ms":'
        + str(int(ts_ms))
        + "}"
    )
    if cfg.key_schemas:
        key = with_schema(dumps(transaction_key_schema()), key)
    if cfg.schemas_enable:
        value = with_schema(dumps(transaction_value_schema()), value)
    return Record(cfg.tx_topic, key, value)


def transaction_block_json(tx_id: str, total_order: int, data_collection_order: int) -> str:
    return (
        '{"id":'
        + json_str(tx_id)
        + ',"total_order":'
        + str(int(total_order))
        + ',"data_collection_order":'
        + str(int(data_collection_order))
        + "}"
    )
