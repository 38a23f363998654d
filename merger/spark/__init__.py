"""Spark around the merger: the session (``session``), the JVM class-data archive that
starts it faster (``archive``, built by ``warm_up``), the Python workers' daemon and site
(``daemon``, ``site/``), the progress figures read over Py4J (``progress``), and whether a
cluster's executors reach the state directory (``cluster_reach``). Imports ``cdc``,
``merger.errors`` and ``merger.snapshot.chunk_read`` (read slots) only; never the
application (``merger.app``)."""
