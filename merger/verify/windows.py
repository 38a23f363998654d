"""Verify windows: watermark markers written by `cdc verify` (window ids ``verify-...``),
not by the merger's snapshots. Pure Python, no I/O.

`cdc verify` confirms a difference at a known position (``merger.verify.consistent``): it
writes a LOW watermark row, reads the differing keys from the source, writes a HIGH row,
then waits until the merger has applied its table's stream through HIGH in every
partition, and reads the sinks. The merger only reports, per table, which verify windows
it has read and where: the LOW marker's sequence, the partitions whose HIGH it read, and
whether a truncate came after LOW. A window counts as read once the batch that read its
markers has written its changes to the sinks (``commit`` at the end of the batch), so a
status that shows it is never ahead of the sinks.
"""

from __future__ import annotations

PREFIX = "verify-"
KEEP_S = 600.0  # windows older than this are forgotten (a verify waits for far less)
MAX_WINDOWS = 64  # per table, the newest kept


def is_verify_window(window_id: str) -> bool:
    return isinstance(window_id, str) and window_id.startswith(PREFIX)


class VerifyWindows:
    """The verify windows of one table's stream."""

    def __init__(self) -> None:
        self.applied: dict[str, dict] = {}  # read in batches whose changes are in the sinks
        self._seen: dict[str, dict] | None = None  # the running batch's copy, once it read one

    def _working(self) -> dict[str, dict]:
        if self._seen is None:
            self._seen = {
                wid: {**w, "high": list(w["high"]), "lows": list(w["lows"])} for wid, w in self.applied.items()
            }
        return self._seen

    def on_marker(self, window_id: str, kind: str, partition: int, sequence: int, now: float) -> None:
        w = self._working().setdefault(window_id, {"low": None, "high": [], "truncated": False, "at": now, "lows": []})
        if kind == "LOW":
            if partition not in w["lows"]:
                w["lows"].append(partition)
            # one LOW write: the same position in every partition
            w["low"] = sequence if w["low"] is None else min(w["low"], sequence)
        elif kind == "HIGH" and partition not in w["high"] and partition in w["lows"]:
            w["high"].append(partition)

    def on_truncate(self, partition: int) -> None:
        """A truncate read from ``partition``: the windows whose LOW came before it there
        cannot tell an applied change from a wiped row."""
        if not self.applied and self._seen is None:
            return
        for w in self._working().values():
            if partition in w["lows"]:
                w["truncated"] = True

    def commit(self, now: float) -> None:
        """The batch's changes are in the sinks: what it read counts as applied."""
        if self._seen is None and all(now - w["at"] <= KEEP_S for w in self.applied.values()):
            return
        seen = self._working()
        keep = {wid: w for wid, w in seen.items() if now - w["at"] <= KEEP_S}
        newest = sorted(keep, key=lambda wid: keep[wid]["at"])[-MAX_WINDOWS:]
        self.applied = {wid: keep[wid] for wid in newest}
        self._seen = None

    def status(self) -> dict:
        """window id -> {"low": LOW's sequence, "high_partitions": how many partitions' HIGH
        were read (after their LOW), "truncated": a truncate came after LOW}."""
        return {
            wid: {"low": w["low"], "high_partitions": len(w["high"]), "truncated": w["truncated"]}
            for wid, w in self.applied.items()
        }
