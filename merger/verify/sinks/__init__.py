"""Verify's readers of the sinks: one module per sink, each the sink's own client reading
in the sink's own types and carrying the sink's rules, found by the sink's name through
``registry`` (keyed like ``merger.sinks.registry.KINDS``).

* ``base``: what every reader is (``SinkReader``), the errors of a sink read;
* ``postgres``: the PostgreSQL sink (psycopg);
* ``delta``: the Delta Lake sink (deltalake, DataFusion);
* ``registry``: each sink's reader, or why verify cannot read that sink by key range.

The readers live here, not in the sinks' packages: verify checks the pipeline, so it shares
none of the writers' code (only where the Delta sink keeps a table, ``merger.sinks.delta.paths``,
and its version bookkeeping, ``merger.sinks.delta.meta.steps_done``). Only these modules may
name a sink; the rest of verify asks the reader (``tests/unit/test_verify_sink_names.py``).
"""
