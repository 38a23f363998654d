"""What a sink's NUL rule (``merger.sinks.nul``) changed, made visible: ``strip`` and
``replace`` change stored values, which nobody would know otherwise. Per table: a running
count (``cdc status``), a Prometheus counter, and one WARNING the first time in a process."""

from __future__ import annotations

import logging
import threading
from typing import Mapping

from merger.metrics import NUL_VALUES_CHANGED

log = logging.getLogger(__name__)


class NulCounts:
    """Values changed by the NUL rule of one sink, per table, since the process started."""

    def __init__(self, sink: str, policy: str):
        self.sink = sink
        self.policy = policy
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()  # tables are applied from several threads

    def add(self, table: str, changed: Mapping[str, int]) -> None:
        """``changed``: column -> values changed, of one committed batch."""
        n = sum(changed.values())
        if not n:
            return
        with self._lock:
            first = table not in self._counts
            self._counts[table] = self._counts.get(table, 0) + n
        NUL_VALUES_CHANGED.labels(table, self.sink).inc(n)
        if first:
            columns = ", ".join(f"{c!r} ({k})" for c, k in sorted(changed.items()))
            verb = "removed" if self.policy == "strip" else "replaced by U+FFFD"
            log.warning(
                "table %s: NUL characters (U+0000) %s in %d value(s) of column(s) %s for the %s sink "
                "(sinks.%s.nul_policy: %s; PostgreSQL text cannot hold them; docs/values.md explains). "
                "Counted per table in `cdc status` and cdc_merger_nul_values_changed_total; logged once per table",
                table,
                verb,
                n,
                columns,
                self.sink,
                self.sink,
                self.policy,
            )

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
