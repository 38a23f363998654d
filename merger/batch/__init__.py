"""One micro-batch of the merger, without Spark: Kafka records in, sink writes out.

* ``processor``: the batch (replay filter, routing per table, reconcilers fed, changes
  applied in order, windows expired, state saved);
* ``records``, ``order``: records parsed into changes, and the order they are applied in;
* ``tables``: each table's runtime and the registry the snapshot runner shares;
* ``emission``, ``staging``: ready snapshot windows written to the sinks from their staged rows;
* ``pausing``, ``kept``, ``owner_check``: paused tables and the changes kept for them;
* ``origins``: what one physical table of a logical table does alone (a shard's DDL, a
  DROP, a RENAME, a TRUNCATE of one origin);
* ``table_ddl``, ``shard_ddl``, ``sink_writer``: sink tables following the source's DDL;
* ``versions``, ``clock``: a batch's sink versions, and where the batches stand in time.

May import ``cdc`` (the shared core), ``merger.dblog``, ``merger.schema``, ``merger.state``,
``merger.sources``, ``merger.sinks``, ``merger.history``; never the Spark application
(``merger.app``) nor ``ingest``."""
