"""The ``cdc_kafka`` Spark stream source: Kafka read with confluent-kafka as a PySpark Python
data source (options and schema: docs/configuration.md).

``options`` parses the options, ``offsets`` plans offsets and ranges (pure), ``probe`` asks
the broker for partitions and ends (driver), ``reader`` reads ranges into Arrow (executors),
``datasource`` is the Spark data source that ties them together. Import each from its
module: the package itself imports nothing, so a light module of it (the pacing rule that
`cdc status` reads through the state store) does not bring pyspark in."""
