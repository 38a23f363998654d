"""What the changelog sink reads back from Kafka: the tables' states from the control
topic, a changelog topic's sequences per key (the "what the sink holds" of the sequence
guard), and a table's rows as a consumer materializing the topic sees them."""

from __future__ import annotations

import json
import threading
from typing import Callable

import pyarrow as pa

from merger.sinks.base import DELETE_OP, TableId, as_table_id
from merger.sinks.kafka_changelog.codec import SEQ_HEADER, TRUNCATE_HEADER, ChangelogCodec
from merger.sinks.kafka_changelog.state import TableState
from merger.sinks.kafka_changelog.transport import Transport


class ChangelogReads:
    """Composed into ``KafkaChangelogSink`` (its ``readback``): ``state_of(table)`` is the
    sink's state of a table, read under the sink's ``lock``."""

    def __init__(
        self,
        transport: Transport,
        codec: ChangelogCodec,
        state_of: Callable[[TableId], TableState],
        lock: threading.RLock,
    ):
        self.transport = transport
        self.codec = codec
        self.state_of = state_of
        self.lock = lock

    def states(self) -> dict[TableId, TableState]:
        """Every table's state as the control topic holds it (sequences not loaded)."""
        latest: dict[bytes, bytes | None] = {}
        self.transport.read_topic(self.transport.control_topic, lambda m: latest.__setitem__(m.key(), m.value()))
        states = {}
        for k, v in latest.items():
            if not k or not v:
                continue
            st = TableState.from_control(k, v)
            states[st.table] = st
        return states

    def sequences(self, topic: str) -> tuple[dict[bytes, int], set[bytes]]:
        """The sequence of every key the changelog ``topic`` holds (deleted keys included),
        and its live keys."""
        seqs: dict[bytes, int] = {}
        live: set[bytes] = set()

        def handle(msg):
            headers = dict(msg.headers() or [])
            key = msg.key()
            if TRUNCATE_HEADER in headers:
                seqs.pop(key, None)
                live.discard(key)
                return
            if SEQ_HEADER not in headers:
                return
            seqs[key] = int(headers[SEQ_HEADER])
            value = msg.value()
            if value is None or json.loads(value).get("op") == DELETE_OP:
                live.discard(key)
            else:
                live.add(key)

        self.transport.read_topic(topic, handle)
        return seqs, live

    def rows(self, table) -> pa.Table:
        """The table as a consumer materializing the changelog sees it (last record per
        key; deletes and tombstones remove the key)."""
        with self.lock:
            return self.topic_rows(self.state_of(as_table_id(table)))

    def count(self, table) -> int:
        return self.rows(table).num_rows

    def topic_rows(self, st: TableState) -> pa.Table:
        """The rows of the table whose state is ``st`` (``rows``)."""
        latest: dict[bytes, dict | None] = {}

        def handle(msg):
            value = msg.value()
            if value is None:
                latest.pop(msg.key(), None)
                return
            v = json.loads(value)
            if v.get("op") == DELETE_OP:
                latest.pop(msg.key(), None)
            else:
                latest[msg.key()] = v["after"]

        self.transport.read_topic(st.topic, handle)
        names = list(st.columns)
        rows = sorted(latest.values(), key=lambda r: json.dumps([r.get(k) for k in st.keys]))
        arrays = [self.codec.decoded_column([r.get(c) for r in rows], st.columns[c], st.bits.get(c)) for c in names]
        return pa.table(arrays, names=names)
