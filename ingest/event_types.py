"""Which binlog event types ingest may pass over, and what to say about the others.

mysql-replication builds only the event classes it is asked for and returns nothing for
the rest (an unknown type becomes a ``NotImplementedEvent``, dropped by ``only_events``):
an event that carries row changes or a statement would be skipped without a word. So the
reader checks every event type against this list: a type ingest reads, or one that carries
no change, goes on; any other stops ingest with ``unhandled_event_message``.
"""

from __future__ import annotations

__all__ = ["READ_TYPES", "PASSED_OVER_TYPES", "IGNORABLE_FLAG", "event_type_name", "unhandled_event_message"]

#: the types ingest reads (the compressed ones after ingest.binlog_compression)
READ_TYPES = frozenset(
    {
        2,  # Query
        4,  # Rotate
        15,  # Format_desc
        16,  # Xid
        19,  # Table_map
        23, 24, 25,  # Write/Update/Delete_rows_v1
        27,  # Heartbeat
        30, 31, 32,  # Write/Update/Delete_rows
        38,  # XA_prepare
        162,  # Gtid (MariaDB)
        165, 166, 167, 168, 169, 170, 171,  # the compressed Query and rows events
    }
)  # fmt: skip

#: the types that carry no change of their own
PASSED_OVER_TYPES = frozenset(
    {
        1,  # Start_v3 (binlogs of before MySQL 5.0)
        3,  # Stop: the server stopped
        5,  # Intvar, 13 Rand, 14 User var: context of the statement that follows (a DDL in ROW format)
        13,
        14,
        28,  # Ignorable
        29,  # Rows_query (MySQL's annotate)
        41,  # Heartbeat_v2
        160,  # Annotate_rows: the statement text of the rows events that follow
        161,  # Binlog_checkpoint
        163,  # Gtid_list
        164,  # Start_encryption (the dump thread sends the events decrypted)
    }
)

#: LOG_EVENT_IGNORABLE_F: the server says a replica that does not know the type may skip it
IGNORABLE_FLAG = 0x80

_NAMES = {
    1: "Start_v3",
    6: "Load",
    7: "Slave",
    8: "Create_file",
    9: "Append_block",
    10: "Exec_load",
    11: "Delete_file",
    12: "New_load",
    17: "Begin_load_query",
    18: "Execute_load_query",
    20: "Write_rows_event_old",
    21: "Update_rows_event_old",
    22: "Delete_rows_event_old",
    26: "Incident",
    33: "MySQL Gtid",
    34: "MySQL Anonymous_Gtid",
    35: "MySQL Previous_gtids",
    36: "Transaction_context",
    37: "View_change",
    39: "Partial_update_rows",
    40: "Transaction_payload",
    165: "Query_compressed",
    166: "Write_rows_compressed_v1",
    167: "Update_rows_compressed_v1",
    168: "Delete_rows_compressed_v1",
    169: "Write_rows_compressed",
    170: "Update_rows_compressed",
    171: "Delete_rows_compressed",
}

_STATEMENT_LOAD = frozenset({6, 8, 9, 10, 11, 12, 17, 18})


def event_type_name(etype: int) -> str:
    return _NAMES.get(etype, f"type {etype}")


def _advice(etype: int) -> str:
    if etype in _STATEMENT_LOAD:
        return (
            "it is a LOAD DATA logged as a statement (a session ran with binlog_format other than ROW): "
            "set binlog_format=ROW for every session (SET GLOBAL, and no SET SESSION binlog_format), then "
            "re-snapshot the table it loaded and start ingest past it (start.mode: gtid after that transaction)"
        )
    if etype == 26:
        return (
            "the server wrote an Incident: changes may be missing from its binlog (see its error log). "
            "Re-snapshot the captured tables and start ingest past it (start.mode: gtid after the incident)"
        )
    return "ingest does not read this event type; please report it with the output of mariadb-binlog around it"


def unhandled_event_message(etype: int, file: str | None, pos: int) -> str:
    """One line: a binlog event that may carry changes ingest cannot read."""
    return (
        f"binlog event {event_type_name(etype)} ({etype}) at {file or '<unknown file>'}:{pos} may carry row "
        f"changes or statements that ingest cannot read, so ingest stopped before it (nothing after it was "
        f"written; a restart stops here again): {_advice(etype)}"
    )
