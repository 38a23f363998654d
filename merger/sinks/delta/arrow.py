"""A Delta table as Arrow sees it, for the Delta sink's modules: its schema, and its files
as a dataset without the log's statistics (inexact for some key types)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable


def delta_arrow_schema(dt: DeltaTable) -> pa.Schema:
    return pa.schema(dt.schema().to_arrow())


def without_log_statistics(dataset: ds.FileSystemDataset) -> ds.FileSystemDataset:
    """The same files without the guarantees deltalake derives from the Delta log's
    statistics: inexact for some key types (a decimal(20, 0) max of 18446744073709551614
    logged as 9223372036854775807), they made a filtered read miss a tombstone, and a stale
    snapshot row of a deleted key came back. Parquet's own statistics still prune."""
    fragments = [f.format.make_fragment(f.path, f.filesystem) for f in dataset.get_fragments()]
    return ds.FileSystemDataset(fragments, dataset.schema, dataset.format, dataset.filesystem)
