"""Snapshots: chunks of a table read between watermarks, without locks.

* ``chunking``: chunk planning over the primary key (pure, property tested);
* ``runner``: the snapshot runner (plans, watermarks, windows, pause/resume/cancel);
* ``chunk_read``: chunk reads as Spark tasks;
* ``direct_read``: small reads on the driver, without a Spark job.
"""
