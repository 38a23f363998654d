"""The merger's view of a table's schema: definitions from the schema-change topic or the
source (``catalog``), the one canonical Arrow schema per table version (``canonical``),
and what a DDL does to the sink tables (``change``, pure). Imports ``cdc``, ``merger.errors``,
``merger.mysql`` (the catalog reads the source) and ``merger.sinks.types`` (storage widths)."""
