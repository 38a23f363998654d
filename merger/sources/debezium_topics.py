"""The kind of source ``debezium`` (``DebeziumTopics``): what the merger does differently
when the topics are written by Debezium's own MySQL connector (Kafka Connect) instead of
``ingest`` (``source_connector: debezium``).

Debezium's records carry no ``cdc.position`` header and the merger's DBLog watermark
markers never appear on its topics (only ingest writes them). So:

* **Snapshots are Debezium's.** Its initial snapshot arrives on the topics as ``r``
  records; more snapshots are *incremental snapshots* asked for by inserting an
  ``execute-snapshot`` row into Debezium's signal table (``signal.data.collection``).
  Debezium's incremental snapshot is itself DBLog (chunk windows bracketed by rows it
  writes into the same signal table, deduplicated against the binlog in between), and it
  emits the surviving rows as ``r`` records in the table's topic. The merger applies
  them like any upsert. ``SignalWriter`` turns ``cdc snapshot`` requests (and the
  automatic ones) into signal rows.
* **Replays are recognised by ``source.file/pos/row``** (``DebeziumReplayFilter``), but
  Debezium gives many records the same position, measured here with Debezium 3.6:

  - the initial snapshot: every ``r`` record and every schema-change record of it carry
    the binlog position read when the snapshot started (``row`` 0,
    ``source.snapshot`` = ``first``/``true``/``last``...);
  - an incremental snapshot chunk: every ``r`` record carries the position of the
    chunk's close-window signal row (``row`` 0, ``source.snapshot`` = ``incremental``),
    and comes right before that row in binlog order;
  - a primary-key change: the delete of the old key and the create of the new key share
    the update's position.

  So a record is dropped only if its position is strictly *below* the highest one taken
  from its partition; equal positions pass. A record of an initial snapshot always
  passes and restarts the partition's position: a new initial snapshot (Debezium's
  offsets lost, ``snapshot.mode: when_needed`` after a binlog reset) may legitimately
  begin lower than what came before.
* **Sequences are Kafka offsets** (``DebeziumTopics.sequence_of``): binlog positions
  cannot order the changes of a key here (the first streamed change after the initial
  snapshot may have the snapshot's very position), while Kafka Connect's murmur2
  partitioner puts every change of a key into one partition, in binlog order.
* **Schema changes are only on the schema-change topic** (no DDL markers in the table
  topics): the sink tables follow its records where they are read.
* **A truncate is one record, in one partition**: a change committed after it but read
  earlier from another partition is wiped too, so the merger asks Debezium for a snapshot
  of the table, which brings such rows back.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Sequence

import pymysql

from cdc.quoting import quote_ident
from cdc.wire.position import EventPosition, ReplayFilter
from merger.batch.order import binlog_order, by_sequence
from merger.errors import MergerError

log = logging.getLogger(__name__)

# source.snapshot of the records of an initial (or blocking) snapshot: Debezium's
# SnapshotRecord values other than "false" and "incremental"
INITIAL_SNAPSHOT = frozenset({"true", "first", "last", "first_in_data_collection", "last_in_data_collection"})


def signal_ddl(table: str) -> str:
    """The signal table Debezium documents (id, type, data)."""
    db, name = table.split(".", 1)
    return (
        f"CREATE TABLE {quote_ident(db)}.{quote_ident(name)} (id VARCHAR(42) PRIMARY KEY, "
        "type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)"
    )


class DebeziumReplayFilter(ReplayFilter):
    """``ReplayFilter`` for Debezium's positions (see the module docstring)."""

    def accept_record(self, topic: str, partition: int, position: EventPosition | None, payload: dict | None) -> bool:
        if position is None:
            return True  # tombstones, records without a source block
        tp = (topic, partition, "")
        prev = self.highest.get(tp)
        snapshot = str(((payload or {}).get("source") or {}).get("snapshot", "false")).lower()
        if snapshot not in INITIAL_SNAPSHOT and prev is not None and position < prev[0]:
            return False
        if prev is None or snapshot in INITIAL_SNAPSHOT or position > prev[0]:
            self.highest[tp] = (position, False)
        return True


def collection_regex(table: str) -> str:
    """Debezium reads ``data-collections`` as regular expressions: match exactly ``table``."""
    return re.escape(table)


def signal_row(action: str, table: str, where: str | None = None) -> tuple[str, dict]:
    """(signal type, data) of the Debezium signal for a merger request.

    ``snapshot`` -> ``execute-snapshot`` (incremental; ``where`` becomes Debezium's
    ``additional-conditions``); ``pause``/``resume`` -> ``pause-snapshot``/``resume-snapshot``
    (they act on the connector's whole incremental snapshot, not on one table);
    ``cancel`` -> ``stop-snapshot`` of that table."""
    coll = collection_regex(table)
    if action == "snapshot":
        data: dict = {"data-collections": [coll], "type": "incremental"}
        if where:
            data["additional-conditions"] = [{"data-collection": coll, "filter": where}]
        return "execute-snapshot", data
    if action in ("pause", "resume"):
        return f"{action}-snapshot", {"type": "incremental"}
    if action == "cancel":
        return "stop-snapshot", {"data-collections": [coll], "type": "incremental"}
    raise ValueError(f"no Debezium signal for {action!r}")


class SignalWriter:
    """Writes Debezium signal rows for the merger's snapshot requests. Source accesses go
    through a ``SourceGuard`` (transient failures are retried); a missing table or
    privilege stops the merger with one line saying what to do."""

    def __init__(self, mysql, signal_table: str | None, store, guard=None):
        from merger.mysql.source import SourceGuard

        self.mysql = mysql
        self.table = signal_table
        self.store = store
        self.guard = guard or SourceGuard()

    def _insert_sql(self) -> str:
        db, name = self.table.split(".", 1)
        return f"INSERT INTO {quote_ident(db)}.{quote_ident(name)} (id, type, data) VALUES (%s, %s, %s)"

    def _explain(self, exc: pymysql.err.MySQLError) -> MergerError | None:
        code = exc.args[0] if exc.args else None
        if code in (1044, 1142, 1143):  # access denied to the database / table / column
            return MergerError(
                f"the merger's MySQL user ({self.mysql.user}) cannot write Debezium's signal "
                f"table {self.table}: GRANT INSERT ON {self.table} TO that user"
            )
        if code == 1146:
            return MergerError(
                f"Debezium's signal table {self.table} does not exist: create it with "
                f"{signal_ddl(self.table)} and set the connector's signal.data.collection "
                f"to {self.table} (and capture it: table.include.list)"
            )
        if code in (1054, 1136, 1364, 1406):
            return MergerError(
                f"{self.table} is not a Debezium signal table (id VARCHAR(42), type "
                f"VARCHAR(32), data VARCHAR(2048)): {exc.args[-1]}"
            )
        return None

    def _insert(self, row: tuple | None) -> None:
        """Insert a signal row; ``None`` probes the privilege with an INSERT that matches
        no row (nothing changes, nothing reaches the binlog)."""
        from merger.mysql.source import connect

        db, name = self.table.split(".", 1)
        conn = connect(self.mysql)
        try:
            with conn.cursor() as cur:
                if row is None:
                    cur.execute(
                        f"INSERT INTO {quote_ident(db)}.{quote_ident(name)} (id, type, data) "
                        "SELECT '', '', NULL FROM DUAL WHERE 1 = 0"
                    )
                else:
                    cur.execute(self._insert_sql(), row)
        except pymysql.err.MySQLError as exc:
            explained = self._explain(exc)
            if explained is not None:
                raise explained from None
            raise  # the guard retries what is transient
        finally:
            conn.close()

    def check(self) -> None:
        """At start: the signal table exists and the merger may insert into it."""
        if self.table is None:
            log.warning(
                "source_connector debezium without signal_table: the merger relies on Debezium's "
                "initial snapshot on the topics; `cdc snapshot` cannot ask for more"
            )
            return
        self.guard.call("checking Debezium's signal table", self._insert, None)

    def send(self, action: str, table: str, where: str | None = None) -> str:
        """Insert the signal row; returns its id (Debezium names its notifications after it)."""
        if self.table is None:
            raise MergerError(
                f"{action} of {table}: set signal_table (Debezium's signal.data.collection) "
                "to request snapshots from Debezium"
            )
        kind, data = signal_row(action, table, where)
        signal_id = str(uuid.uuid4())
        row = (signal_id, kind, json.dumps(data, separators=(",", ":")))
        self.guard.call(f"writing Debezium's {kind} signal", self._insert, row)
        log.info("asked Debezium for %s of %s (signal %s in %s)", kind, table, signal_id, self.table)
        return signal_id

    def handle(self, request: dict) -> None:
        """One control request (``StateStore.request``) in Debezium mode.

        The plan file records the signal so that an automatic request is not repeated
        after a restart; it is finished at once, because Debezium runs the snapshot."""
        table, action = request["table"], request["action"]
        args = request.get("args", {})
        plan = self.store.load_plan(table)
        if action == "snapshot":
            if args.get("auto") and plan is not None:
                return  # met again after a restart: already asked for
            if self.table is None:
                if args.get("auto"):
                    return  # nothing to ask Debezium with; its initial snapshot is on the topics
                log.error("snapshot of %s: no signal_table configured; request ignored", table)
                return
            signal_id = self.send("snapshot", table, args.get("where"))
            now = time.time()
            self.store.save_plan(
                table,
                {
                    "table": table,
                    "where": args.get("where"),
                    "created_at": now,
                    "debezium_signal": signal_id,
                    "chunks": [],
                    "done": [],
                    "rows": 0,
                    "finished_at": now,
                },
            )
        elif action in ("pause", "resume", "cancel") and plan is not None and self.table is not None:
            self.send(action, table)


class DebeziumTopics:
    """Topics written by Debezium's MySQL connector (``merger.sources.SourceKind``)."""

    name = "debezium"
    follows_moved_topics = False  # no ingest position records name the topics written
    ddl_markers = False  # the schema-change topic's records are followed instead
    truncate_in_every_partition = False  # one truncate record: a snapshot follows it
    watermark_windows = False  # Debezium's snapshots arrive as ``r`` records
    shards = False

    def replay_filter(self) -> ReplayFilter:
        return DebeziumReplayFilter()

    def order_of(self, item) -> int:
        return binlog_order(item)

    def sequence_of(self, order: int, offset: int) -> int:
        return offset

    def in_order(self, items: Sequence) -> list:
        return by_sequence(items)

    def reconciler_order(self, offset: int, sequence: int) -> tuple[int, int | None]:
        return sequence, None

    def snapshot_signals(self, config, store, guard) -> SignalWriter:
        return SignalWriter(config.mysql, config.signal_table, store, guard)
