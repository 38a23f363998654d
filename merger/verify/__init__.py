"""Verify: compare sink tables with their source, independently of the pipeline.

* ``canonical``: the one canonical form of a value (source and sink side), pure, no
  pipeline code;
* ``source``: the source's columns (information_schema) and plain ``SELECT`` reads;
* ``sinks``: one reader per sink (its own client, its own types, its own rules), found
  through ``sinks.registry``; no other module here names a sink;
* ``keys``: key values for range reads and key lookups;
* ``side``: one sink table with its canonical functions;
* ``table``: a whole-table comparison (tests, demo);
* ``chunked``: the chunked comparison behind ``cdc verify`` (key ranges, digests, re-checks);
* ``digest``: order-independent chunk digests and diffs, pure.
"""
