"""Which databases, tables and columns ingest captures (regexes, full match, like
Debezium's database/table/column include and exclude lists)."""

from __future__ import annotations

import re
from functools import lru_cache

from cdc.config import IngestConfig
from cdc.shard_cutover import CUTOVER_TABLE
from ingest.errors import IngestError
from ingest.fatal import dotted_database_message

SYSTEM_DATABASES = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


def _compile(patterns: list[str]) -> list[re.Pattern]:
    return [re.compile(p, re.IGNORECASE) for p in patterns]


class CaptureFilter:
    def __init__(self, config: IngestConfig):
        self._db_in = _compile(config.database_include)
        self._db_out = _compile(config.database_exclude)
        self._t_in = _compile(config.table_include)
        self._t_out = _compile(config.table_exclude)
        self._c_out = _compile(config.column_exclude)
        self._c_mask = _compile(config.column_mask)
        self.watermark_table = tuple(config.watermark_table.split(".", 1))
        # the moves' control rows (key mode unique), beside the watermark table
        self.cutover_table = (self.watermark_table[0], CUTOVER_TABLE)

    @staticmethod
    def _match(patterns: list[re.Pattern], text: str) -> bool:
        return any(p.fullmatch(text) for p in patterns)

    @lru_cache(maxsize=65536)
    def captures_table(self, db: str, table: str) -> bool:
        if db in SYSTEM_DATABASES or (db, table) in (self.watermark_table, self.cutover_table):
            return False
        if self._db_in and not self._match(self._db_in, db):
            return False
        if self._match(self._db_out, db):
            return False
        name = f"{db}.{table}"
        if self._t_in and not self._match(self._t_in, name):
            return False
        if self._match(self._t_out, name):
            return False
        return _undotted(db)

    def captures_database(self, db: str) -> bool:
        if db in SYSTEM_DATABASES:
            return False
        if self._db_in and not self._match(self._db_in, db):
            return False
        return not self._match(self._db_out, db) and _undotted(db)

    def excluded_column(self, db: str, table: str, column: str) -> bool:
        return self._match(self._c_out, f"{db}.{table}.{column}")

    def masked_column(self, db: str, table: str, column: str) -> bool:
        return self._match(self._c_mask, f"{db}.{table}.{column}")


def _undotted(db: str) -> bool:
    """True for a database ingest can capture; IngestError for one whose name has a '.':
    every consumer (the merger, watermark rows, ``cdc snapshot db.table``) reads a table's
    name ``db.table`` up to the first '.', so its tables would be taken for others."""
    if "." in db:
        raise IngestError(dotted_database_message(db))
    return True
