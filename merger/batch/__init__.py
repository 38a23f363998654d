"""One micro-batch of the merger, without Spark: Kafka records in, sink writes out.

* ``processor``: the batch (replay filter, routing per table, reconcilers fed, changes
  applied in order, windows expired, state saved);
* ``records``, ``order``: records parsed into changes, and the order they are applied in;
* ``tables``: each table's runtime and the registry the snapshot runner shares;
* ``emission``, ``staging``: ready snapshot windows written to the sinks from their staged rows;
* ``pausing``, ``kept``, ``owner_check``: paused tables and the changes kept for them;
* ``table_ddl``, ``shard_ddl``, ``sink_writer``: sink tables following the source's DDL.

May import ``cdc`` (the shared core), ``merger.dblog``, ``merger.schema``, ``merger.state``,
``merger.sources``, ``merger.sinks``, ``merger.history``; never the Spark application
(``merger.app``) nor ``ingest``."""
