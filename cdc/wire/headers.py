"""Names of the headers ingest puts on records (beside Debezium's own)."""

from __future__ import annotations

POSITION_HEADER = "cdc.position"  # EventPosition.encode(): binlog file:pos:row[:part[:epoch]]
WATERMARK_HEADER = "cdc.watermark"  # a watermark marker: {"table", "window", "kind"}
DDL_HEADER = "cdc.ddl"  # a DDL marker (cdc/ddl.py ddl_marker)
# key mode unique (docs/sharding.md, section 4): the emission counter, the sink's sequence
EMITTED_HEADER = "cdc.emitted"  # decimal; rises with each record one ingest process writes
MOVED_FROM_HEADER = "cdc.moved_from"  # the shards a change's key was moved away from, comma-separated
MOVED_TO_HEADER = "cdc.moved_to"  # a write on a shard after its switch moved the key to this one


def header_map(pairs: list) -> dict | list:
    """A record's headers, ``(name, value)`` pairs, as the merger reads them: name -> value,
    or, when a name repeats, the list of ``{"key": name, "value": value}`` as given (nothing
    lost on the way to the dead-letter topic). The one rule for both ways a batch is read
    (Arrow from Spark, or messages in the driver)."""
    found = dict(pairs)
    if len(found) < len(pairs):
        return [{"key": k, "value": v} for k, v in pairs]
    return found
