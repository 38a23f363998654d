"""Names of the headers ingest puts on records (beside Debezium's own)."""

from __future__ import annotations

POSITION_HEADER = "cdc.position"  # EventPosition.encode(): binlog file:pos:row[:part[:epoch]]
WATERMARK_HEADER = "cdc.watermark"  # a watermark marker: {"table", "window", "kind"}
DDL_HEADER = "cdc.ddl"  # a DDL marker (cdc/ddl.py ddl_marker)
