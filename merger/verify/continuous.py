"""Continuous verification: the merger verifies its tables in the background, within a
budget of chunks per minute (``verify.continuous``), table after table, each difference
confirmed at a known position in a verify window (``merger.verify.consistent``), as
`cdc verify` does. Each table's last pass shows in the status and the metrics; with
``repair: true`` what a pass confirms is handed to the snapshot runner as a repair.

A thread of its own, with its own source and sink connections; it reads the merger's
state only through the table registry (under its lock, never during a batch's writes).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from prometheus_client import Counter, Gauge

from cdc.config import MergerConfig
from merger.batch.tables import TableRegistry
from merger.dblog import encode_key
from merger.mysql.source import WatermarkWriter
from merger.snapshot.repair import RepairError, differing_keys
from merger.state.store import StateStore, batch_prompter
from merger.verify.chunked import TableVerifier
from merger.verify.consistent import Confirmer, NotConfirmed
from merger.verify.current_versions import reader_for_mode
from merger.verify.sinks.base import SinkReadError
from merger.verify.sinks.registry import configured_readable, sink_reader
from merger.verify.source import SourceReader, SourceReadError

log = logging.getLogger(__name__)

CHUNKS = Counter("cdc_merger_verify_chunks", "Chunks verified in the background", ["table", "sink"])
DIFFERING = Counter(
    "cdc_merger_verify_differing_chunks", "Chunks the background verify confirmed as different", ["table", "sink"]
)
LAST_PASS = Gauge("cdc_merger_verify_last_pass_seconds", "When the table's last full pass ended (Unix time)", ["table"])
DIFFERING_KEYS = Gauge("cdc_merger_verify_differing_keys", "Keys the table's last pass found different", ["table"])
HISTORY_FAULTS = Gauge(
    "cdc_merger_verify_history_faults", "Faults of an SCD type 2 table's shape its last pass found", ["table"]
)


class ContinuousVerifier(threading.Thread):
    def __init__(self, config: MergerConfig, store: StateStore, tables: TableRegistry):
        super().__init__(name="verify", daemon=True)
        self.config = config
        self.settings = config.verify.continuous
        self.store = store
        self.tables = tables
        self.stop_event = threading.Event()
        self.passes: dict[str, dict] = {}  # table -> its last pass (the status shows it)
        prompt = batch_prompter(store, config.min_batch_gap_ms)  # the merger reads our watermarks at once
        self.watermarks = WatermarkWriter(config.mysql, config.watermark_table, before_write=prompt)
        self._sinks = configured_readable(config.sinks)
        self._last_chunk = 0.0

    @staticmethod
    def wanted(config: MergerConfig) -> str | None:
        """Why continuous verification does not run with this config (None: it runs)."""
        if config.verify.continuous.chunks_per_minute <= 0:
            return "off"
        if config.source_connector != "ingest":
            return "source_connector debezium: no verify windows in the topics"
        if config.shards or config.routes:
            return "not built for sharded or routed sources yet"
        if not configured_readable(config.sinks):
            return "no sink that keeps rows"
        return None

    def run(self) -> None:
        while not self.stop_event.is_set():
            names = [n for n, rt in sorted(self.tables.items()) if rt.phase == "streaming" and rt.keys]
            if not names:
                self.stop_event.wait(5)
                continue
            for name in names:
                if self.stop_event.is_set():
                    break
                try:
                    self._pass(name)
                except Exception as exc:  # noqa: BLE001 - a pass fails alone; the next one tries again
                    log.warning("background verify of %s failed: %s", name, exc)
                    self.passes[name] = {"at": time.time(), "verdict": "error", "error": str(exc)[:300]}
                    self.stop_event.wait(10)
        self.watermarks.close()

    def _pace(self, table: str, *_progress) -> None:
        """Called after each chunk: counts it, and keeps to ``chunks_per_minute``."""
        for sink in self._sinks:
            CHUNKS.labels(table, sink).inc()
        gap = 60.0 / self.settings.chunks_per_minute
        wait = self._last_chunk + gap - time.monotonic()
        if wait > 0:
            self.stop_event.wait(wait)
        self._last_chunk = time.monotonic()
        if self.stop_event.is_set():
            raise _Stopped()

    def _pass(self, name: str) -> None:
        rt = self.tables.get(name)
        if rt is None:
            return
        db, table = name.split(".", 1)
        sinks = self.config.sinks
        # an SCD type 2 table by its current versions; a change log has no latest state to compare
        opened = {n: sink_reader(n, sinks) for n in configured_readable(sinks)}
        readers = {n: reader_for_mode(r, sinks.table_mode(n, name)) for n, r in opened.items()}
        readers = {n: r for n, r in readers.items() if r is not None}
        if not readers:
            for r in opened.values():
                r.close()
            return
        source = SourceReader(self.config.mysql)
        started = time.time()
        try:
            described = source.describe(db, table)
            if described is None:
                return
            verifier = TableVerifier(
                source,
                described,
                list(rt.keys),
                readers,
                self.settings.chunk_size,
                retries=2,
                limit=10_000,
                on_progress=self._pace,
                confirm=Confirmer(self.watermarks.write, self._window_status),
            )
            results = verifier.run()
        except _Stopped:
            return
        except (SourceReadError, SinkReadError, NotConfirmed) as exc:
            self.passes[name] = {"at": time.time(), "verdict": "error", "error": str(exc)[:300]}
            return
        finally:
            source.close()
            for r in opened.values():
                r.close()
        differing = sum(len(r.missing) + len(r.extra) + len(r.different) + r.unlisted for r in results)
        verdicts = {r.verdict for r in results}
        verdict = "different" if "different" in verdicts else "error" if "error" in verdicts else "equal"
        for r in results:
            DIFFERING.labels(name, r.sink).inc(r.mismatched_chunks)
        LAST_PASS.labels(name).set(time.time())
        DIFFERING_KEYS.labels(name).set(differing)
        last = {
            "at": time.time(),
            "started_at": started,
            "verdict": verdict,
            "chunks": max((r.chunks for r in results), default=0),
            "differing_keys": differing,
            "changing_keys": sum(r.changing for r in results),
        }
        faults = sum(f.count for r in results for f in r.history_faults)
        HISTORY_FAULTS.labels(name).set(faults)
        if faults:
            last["history_faults"] = faults  # an SCD type 2 table's shape: reported, never repaired
        errors = [f"{r.sink}: {r.error}" for r in results if r.error]
        if errors:
            last["error"] = "; ".join(errors)[:300]
        if verdict == "different":
            shape = f", {faults} faults of the history's shape" if faults else ""
            log.warning(
                "background verify of %s: %d keys differ%s (`cdc verify %s` lists them)", name, differing, shape, name
            )
            if self.settings.repair:
                last["repair"] = self._repair(name, results)
        self.passes[name] = last

    def _repair(self, name: str, results) -> str:
        keys: list[tuple] = []
        for r in results:
            if r.verdict != "different":
                continue
            try:
                keys += differing_keys(r)
            except RepairError as exc:
                log.warning("background verify of %s: %s", name, exc)
                return f"not repaired: {exc}"
        keys = list(dict.fromkeys(keys))
        if not keys:
            return "nothing to repair"
        self.store.request("repair", name, keys=[encode_key(k) for k in keys], id=uuid.uuid4().hex)
        log.info("background verify of %s: a repair of %d keys asked for", name, len(keys))
        return f"repair of {len(keys)} keys asked for"

    def _window_status(self, table: str, window_id: str) -> dict | None:
        with self.tables.locked():
            rt = self.tables.get(table)
            if rt is None or rt.phase != "streaming":
                raise NotConfirmed(f"{table} is {'gone' if rt is None else rt.phase}: its pass stops")
            found = rt.verify_windows.status().get(window_id)
            return None if found is None else {**found, "partitions": rt.partitions}


class _Stopped(Exception):
    """The merger stops: the pass ends where it is."""
