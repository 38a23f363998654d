"""BEGIN, savepoints, ROLLBACK and XA statements inside the binlog, applied to the source
transaction being read (ingest/statements.py says what MariaDB writes and when)."""

from __future__ import annotations

import logging

from cdc.config import IngestConfig
from cdc.wire.position import EventPosition
from ingest import metrics, statements
from ingest.errors import IngestError
from ingest.fatal import exposed_rollback_message
from ingest.stream import SourceTransaction

log = logging.getLogger(__name__)


class TransactionControl:
    def __init__(self, config: IngestConfig):
        self.config = config
        self.prefix = config.topic_prefix
        self.prepared: dict[str, list[str]] = {}  # XA PREPAREd xid -> captured tables it changed

    def apply(self, stmt: statements.Statement, trx: SourceTransaction, position: EventPosition) -> None:
        """BEGIN, savepoints, ROLLBACK and XA statements inside the binlog (ingest/statements.py
        says what MariaDB writes and when)."""
        kind, where = stmt.kind, f"GTID {trx.gtid} at {position.file}:{position.pos}"
        if kind in (statements.BEGIN, statements.XA_START, statements.XA_END):
            # MariaDB keeps XA START in the GTID event; XA END names the xid in the binlog
            trx.began = True
            trx.xid = stmt.name if kind != statements.BEGIN else None
        elif kind == statements.SAVEPOINT:
            trx.savepoints.pop(stmt.name, None)  # a savepoint set again moves
            trx.savepoints[stmt.name] = trx.released + len(trx.held)
        elif kind == statements.RELEASE:
            trx.savepoints.pop(stmt.name, None)
        elif kind == statements.ROLLBACK_TO:
            if stmt.name not in trx.savepoints:
                raise IngestError(
                    f"transaction {where}: ROLLBACK TO SAVEPOINT {stmt.name} without its SAVEPOINT in the "
                    f"binlog, so ingest cannot tell which row changes were rolled back. Please report this "
                    f"with the output of mariadb-binlog for that transaction"
                )
            names = list(trx.savepoints)
            mark = trx.savepoints[stmt.name]
            if mark < trx.released:
                raise IngestError(
                    exposed_rollback_message(self.prefix, self.config, trx.tables, where, f"ROLLBACK TO {stmt.name}")
                )
            dropped = len(trx.held) - (mark - trx.released)
            del trx.held[mark - trx.released :]
            trx.held_bytes = sum(len(r[1] or b"") + len(r[2] or b"") for r in trx.held)
            # savepoints set after this one are gone, this one stays (SQL semantics)
            trx.savepoints = {n: trx.savepoints[n] for n in names[: names.index(stmt.name) + 1]}
            log.debug("transaction %s: ROLLBACK TO %s drops %d records", where, stmt.name, dropped)
        elif kind == statements.ROLLBACK:
            # e.g. the changes after a SAVEPOINT at the start of a transaction, kept in the
            # binlog by a non-transactional change and then rolled back
            if trx.released:
                raise IngestError(exposed_rollback_message(self.prefix, self.config, trx.tables, where, "ROLLBACK"))
            log.debug("transaction %s: ROLLBACK drops %d records", where, len(trx.held))
            trx.held, trx.held_bytes = [], 0
        elif kind == statements.XA_COMMIT:
            if trx.began:
                trx.xid = None  # XA COMMIT ... ONE PHASE closing its own group: committed
            else:
                self.prepared.pop(stmt.name, None)
        elif kind == statements.XA_ROLLBACK:
            tables = self.prepared.pop(stmt.name, None)
            if tables is None or tables:
                self._xa_rolled_back(stmt.name, tables, where)

    def _xa_rolled_back(self, xid: str, tables: list[str] | None, where: str) -> None:
        """An XA transaction rolled back after XA PREPARE. Its row changes are in the binlog
        at the PREPARE and were written to Kafka there (as Debezium does): they never
        happened in the source."""
        changed = (
            f"its changes to {', '.join(tables)} were written to Kafka at its XA PREPARE"
            if tables
            else "it was prepared before this ingest process started, so ingest cannot tell whether "
            "its changes to captured tables were written to Kafka at its XA PREPARE"
        )
        message = (
            f"XA ROLLBACK {xid} ({where}): {changed}, and the source rolled them back. Re-snapshot "
            f"the tables it changed (cdc snapshot <db.table>)"
        )
        if self.config.on_xa_rollback == "warn":
            log.error("%s; going on (on_xa_rollback: warn)", message)
            metrics.ERRORS.labels("xa_rollback").inc()
            return
        raise IngestError(f"{message}, then restart ingest with on_xa_rollback: warn to go past it")
