"""A batch that only opens SCD type 2 versions, planned over Arrow columns (pure, no I/O).

``scd2.apply_changes`` plans a batch change by change, a Python object per row. Most of
the rows a history table takes in bulk (a snapshot of a new table, a backlog of inserts)
meet a key without a history, once each: then the plan is known without the rules'
walk. Each insert, update or snapshot row opens one version (its values, from its own
sequence and time; the last sequence its own), a delete of a key without a history does
nothing, and no note is made (a note needs a history). ``only_opens`` says whether a batch
is such a batch; ``opened_versions`` gives those versions as columns. Any other batch (a key
with a history, a key changed twice, an op or sequence the model refuses, a key type
whose equality Arrow and Python may judge differently) goes through ``apply_changes``.
tests/unit/test_scd2_opened.py proves the two equal on random batches.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from merger.history.arrow_keys import same_keys_by_arrow_and_python
from merger.history.change import DELETE, UPSERTS

OPS = tuple(sorted(UPSERTS | {DELETE}))  # the ops such a batch may hold


def only_opens(keys: pa.Table, ops: pa.ChunkedArray | pa.Array, sequences: pa.ChunkedArray | pa.Array) -> bool:
    """Whether a batch of changes (``keys``: their key columns; ``ops``; ``sequences``) of
    keys that have no history only opens versions: no key twice, every op an insert,
    update, snapshot row or delete, every sequence an int >= 0."""
    n = keys.num_rows
    if n == 0 or len(ops) != n or len(sequences) != n:
        return False
    if not all(same_keys_by_arrow_and_python(f.type) for f in keys.schema):
        return False
    if ops.null_count or not pc.all(pc.is_in(ops, value_set=pa.array(OPS, pa.string()))).as_py():
        return False
    if sequences.null_count or not pa.types.is_integer(sequences.type) or pc.min(sequences).as_py() < 0:
        return False
    return keys.group_by(keys.column_names).aggregate([]).num_rows == n


def opened_versions(
    values: pa.Table,
    ops: pa.ChunkedArray | pa.Array,
    sequences: pa.ChunkedArray | pa.Array,
    times: pa.ChunkedArray | pa.Array,
    start_at: str,
    end_at: str,
    start_seq: str,
    end_seq: str,
    last_seq: str,
) -> pa.Table:
    """The versions a batch for which ``only_opens`` holds opens, in its order: ``values``
    (the rows after each change) of every change but a delete, with the history's own
    columns (named by the caller): start and last sequence the change's, start time its
    time (``times``, int64), end sequence and time null (open)."""
    keep = pc.not_equal(ops, DELETE)
    rows = values.filter(keep)
    sequences = pc.filter(sequences, keep).cast(pa.int64())
    n = rows.num_rows
    return (
        rows.append_column(start_at, pc.filter(times, keep).cast(pa.int64()))
        .append_column(end_at, pa.nulls(n, pa.int64()))
        .append_column(start_seq, sequences)
        .append_column(end_seq, pa.nulls(n, pa.int64()))
        .append_column(last_seq, sequences)
    )
