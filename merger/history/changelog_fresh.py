"""Which changes of a batch a change log appends, over Arrow columns (pure, no I/O).

``changelog.appended_rows`` walks a batch change by change, a Python object per row: at
300,000 snapshot rows that walk was 93 % of the Delta change log's write, which then took
0.47x the latest state's rows/s. Its rule, stated over the whole batch: a change is
appended exactly when

* its sequence is above its key's last sequence in the log (-1: none), and
* it is the first change of its (key, sequence) in the batch.

Why that is the walk's rule: the walk takes the changes in sequence order (a stable sort),
appends a change above the key's last appended sequence and moves that to the change's.
The changes of a key met before a change ``c`` have sequences at or below ``c``'s; the
first one of ``c``'s (key, sequence) meets only appended sequences below its own, so it is
appended when it is above the log's; a later one of the same (key, sequence) meets that
sequence and is dropped; and a change at or below the log's last sequence meets at least
that. The stable sort keeps a batch's equal (key, sequence) in their order: the first in
the batch is the first met.

``fresh_mask`` refuses (None) what it cannot judge as the walk does: a key type whose
equality Arrow and Python may judge differently, a negative or null sequence (the model
refuses those); the caller then walks. tests/unit/test_changelog_fresh.py proves the two
equal on random batches.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from merger.history.arrow_keys import same_keys_by_arrow_and_python
from merger.history.changelog import LOG_SEQ

# the columns of the tables built here (the keys by position: no name of the user's meets them)
SEQ, ROW, LAST = "seq", "row", "last"


def fresh_mask(
    keys: pa.Table, sequences: pa.ChunkedArray | pa.Array, held: pa.Table | None = None, held_sequence: str = LOG_SEQ
) -> pa.Array | None:
    """Which of a batch's changes the log appends, as a boolean array in the batch's order.
    ``keys``: the changes' key columns; ``sequences``: theirs (int); ``held``: rows of the
    log that may hold a key's last sequence (the same key columns and ``held_sequence``, the
    log's ``__seq``), a row with a null key counting for none (a truncate's). None: the
    batch is left to the walk."""
    n = keys.num_rows
    if len(sequences) != n:
        raise ValueError(f"{len(sequences)} sequences for {n} changes")
    if not pa.types.is_integer(sequences.type) or sequences.null_count:
        return None
    if not all(same_keys_by_arrow_and_python(f.type) for f in keys.schema):
        return None
    if n and pc.min(sequences).as_py() < 0:
        return None
    names = [f"k{i}" for i in range(keys.num_columns)]
    rows = pa.table(
        {**dict(zip(names, keys.columns)), SEQ: pc.cast(sequences, pa.int64()), ROW: pa.array(range(n), pa.int64())}
    )
    firsts = rows.group_by([*names, SEQ], use_threads=False).aggregate([(ROW, "min")])[f"{ROW}_min"]
    if held is None or not held.num_rows:
        return pc.is_in(rows[ROW], value_set=firsts).combine_chunks()
    # the log's key columns in the batch's types (a file may hold string_view): one join
    # key; a null (a truncate row's) joins no change of the batch
    log = pa.table(
        {
            **{name: held.column(c).cast(f.type) for name, c, f in zip(names, keys.column_names, keys.schema)},
            LAST: held[held_sequence].cast(pa.int64()),
        }
    )
    last = log.group_by(names, use_threads=False).aggregate([(LAST, "max")])
    last = pa.table({**{name: last[name] for name in names}, LAST: last[f"{LAST}_max"]})
    joined = rows.join(last, keys=names, join_type="left outer", use_threads=False).sort_by(ROW)
    above = pc.greater(joined[SEQ], pc.fill_null(joined[LAST], -1))
    return pc.and_(pc.is_in(joined[ROW], value_set=firsts), above).combine_chunks()
