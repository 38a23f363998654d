"""The reference sink of the DBLog tests: key -> (sequence, row or DELETED), the sink rule
of ``merger.dblog`` on a dict (a change applies only above the held sequence; a delete is a
tombstone; a truncate tombstones a partition's older keys). The oracle the real sinks and
the reconciliation are checked against."""

from __future__ import annotations

from typing import Callable, Hashable

from merger.dblog import DELETED

Key = Hashable


def apply_change(state: dict, key: Key, sequence: int, row) -> bool:
    """Apply one change (``row`` is DELETED for a delete) if it is newer than the held one."""
    held = state.get(key)
    if held is not None and held[0] >= sequence:
        return False
    state[key] = (sequence, row)
    return True


def apply_truncate(state: dict, partition: int, sequence: int, partition_of: Callable[[Key], int]) -> int:
    """A truncate at ``sequence`` in ``partition``: older keys of that partition become
    tombstones at ``sequence``. Returns how many live rows it deleted."""
    changed = 0
    for key, (seq, row) in list(state.items()):
        if seq < sequence and partition_of(key) == partition:
            state[key] = (sequence, DELETED)
            changed += row is not DELETED
    return changed


def live_rows(state: dict) -> dict:
    """The rows a reader of the sink sees: key -> row, tombstones left out."""
    return {k: row for k, (_, row) in state.items() if row is not DELETED}
