"""Durable merger state under ``state_dir``: per-batch snapshots of the reconciliation
state, per-table snapshot plans (chunk progress), emission intents, the status file read
by ``cdc status``, and control requests written by the CLI.

Every write is atomic (write to a temp file, fsync, rename), so a kill -9 at any moment
leaves either the old or the new file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from merger.errors import MergerError
from merger.kafka.pacing import PROMPT_S
from merger.state import chain as state_chain

# raised by the processor when snapshot windows are left to emit; the Kafka source
# reports it as the offset of a pseudo-partition (merger.kafka.offsets.read_tick)
TICK_FILE = "emission.tick"
PROMPT_FILE = "batches.prompt"  # merger.kafka.pacing: until when batches are not held
# bytes per record per topic, learned by the processor, read by the Kafka source's planner
RECORD_SIZES_FILE = "record-sizes.json"
TOPIC_IDS_FILE = "topic-ids.json"  # merger.kafka.topic_identity: the ids of the topics read


def atomic_write_json(path: Path, data: Any, durable: bool = True) -> None:
    """``durable=False``: no fsync (a file rewritten every second whose loss in a power cut
    costs nothing, like the status)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        # dumps, not dump: json.dump encodes in Python (only dumps uses the C encoder), 25 %
        # of the idle merger's driver at 500 tables for the status each second
        f.write(json.dumps(data, separators=(",", ":"), default=str))
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


def safe_name(table: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else f"%{ord(ch):04x}" for ch in table)


def replace_text(path: Path, text: str) -> None:
    """``path`` holds ``text``, written aside and renamed: a reader sees the old or the new
    text, never part of it. No fsync: the files written so are asked for again after a crash."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def batch_prompter(store: "StateStore", gap_ms: int) -> Callable[[], None] | None:
    """What a watermark writer calls before each write when ``min_batch_gap_ms`` is set
    (None without it): a time ``PROMPT_S`` ahead in ``PROMPT_FILE``, until which the Kafka
    source holds no batch, so the watermark's record is read at once. A wall-clock time, so
    the source's planner process can read it."""
    if not gap_ms:
        return None
    path = store.root.resolve() / PROMPT_FILE
    return lambda: replace_text(path, repr(time.time() + PROMPT_S))


class StateStore:
    def __init__(self, state_dir: str | Path):
        self.root = Path(state_dir)
        self.batches = self.root / "batches"
        self.plans = self.root / "snapshots"
        self.staging = self.root / "staging"
        self.control = self.root / "control"
        self.checkpoint = self.root / "checkpoint"
        for d in (self.batches, self.plans, self.staging, self.control):
            d.mkdir(parents=True, exist_ok=True)
        # plan path -> (its file's identity, its text): with hundreds of tables, reading
        # every plan file for each status and each pass of the snapshot runner was 13% of
        # the merger's time (issue 23); a file is read again only when it changed
        self._plan_texts: dict[Path, tuple[tuple[int, int, int], str]] = {}
        self._version_bases: dict[str, int] | None = None
        # the batch state chain (merger.state.chain): the last state written or loaded, the
        # full state each state of this process builds on, definitions' texts per table
        self._chain: state_chain.ChainBase | None = None
        self._full_of: dict[int, int] = {}
        self._spec_texts: dict[str, tuple] = {}
        self._entry_texts: dict[str, tuple] = {}
        # the plan directory's last listing: (its time if trusted, when, table -> (text, summary))
        self._plans_listed: tuple[int | None, int, dict[str, tuple[str, dict]]] | None = None
        self._plan_summaries: dict[str, dict] = {}  # plan text -> its summary
        self._status_written: dict | None = None  # the last status written, but its time

    # -- one merger per state directory ---------------------------------------------

    def lock(self) -> None:
        """Hold ``state_dir/merger.lock`` for the life of the process: a second merger on
        the same state would interleave batches and checkpoint writes. The kernel drops
        the lock when the process dies, kill -9 included."""
        f = open(self.root / "merger.lock", "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise MergerError(
                f"another merger is running on state_dir {self.root} (pid {holder}); "
                "stop it first, or give this one its own state_dir"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._lock_file = f
        (self.root / "exit.json").unlink(missing_ok=True)

    def writer_id(self) -> str:
        """This state directory's id, made once: the owner of its merger's claims on the
        sinks' tables (merger/sinks/delta/writers.py), the same after every restart."""
        path = self.root / "writer.json"
        found = read_json(path, {}) or {}
        if not found.get("id"):
            found = {"id": uuid.uuid4().hex}
            atomic_write_json(path, found)
        return found["id"]

    def running_merger(self) -> int | None:
        """The pid of the merger that holds this state_dir, or None if none runs."""
        path = self.root / "merger.lock"
        if not path.exists():
            return None
        with open(path, "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                text = f.read().strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(f, fcntl.LOCK_UN)
            return None

    @contextlib.contextmanager
    def merger_kept_out(self):
        """Hold ``merger.lock`` while an operator command changes the sinks (a merger
        started meanwhile stops at its start); MergerError if a merger runs. The file's
        pid and ``exit.json`` are left as they are: ``cdc status`` still tells of the
        last merger."""
        with open(self.root / "merger.lock", "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "unknown"
                raise MergerError(
                    f"a merger is running on state_dir {self.root} (pid {holder}): stop it first"
                ) from None
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def write_exit(self, reason: str | None) -> None:
        """Why the merger ended (None: stopped on request), for ``cdc status``."""
        atomic_write_json(self.root / "exit.json", {"at": time.time(), "pid": os.getpid(), "reason": reason})

    def read_exit(self) -> dict | None:
        return read_json(self.root / "exit.json")

    # -- emission tick ---------------------------------------------------------------

    @property
    def tick_path(self) -> Path:
        return self.root.resolve() / TICK_FILE

    def tick(self) -> int:
        """The number in the tick file (0: none yet)."""
        try:
            return int(self.tick_path.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def raise_tick(self, value: int) -> None:
        """A new number in the tick file: the Kafka source then gives Spark a reason for
        another micro-batch. No fsync: a tick lost in a crash is asked for again."""
        replace_text(self.tick_path, str(int(value)))

    # -- record sizes (the Kafka source's admission, merger.kafka.admission) ----------

    @property
    def record_sizes_path(self) -> Path:
        return self.root.resolve() / RECORD_SIZES_FILE

    def load_record_sizes(self) -> dict[str, float]:
        """What ``save_record_sizes`` wrote; empty when missing or unreadable (the planner
        reads the file itself: ``merger.kafka.offsets.read_record_sizes``)."""
        try:
            data = read_json(self.record_sizes_path, {})
            return {str(t): float(b) for t, b in data.items()}
        except (OSError, ValueError, AttributeError, TypeError):
            return {}

    def save_record_sizes(self, sizes: dict[str, float]) -> None:
        """No fsync: estimates lost in a crash are learned again (a topic without one is
        admitted a few records at first)."""
        tmp = self.record_sizes_path.with_name(RECORD_SIZES_FILE + ".tmp")
        tmp.write_text(json.dumps({t: round(b, 1) for t, b in sorted(sizes.items())}))
        os.replace(tmp, self.record_sizes_path)

    # -- Spark checkpoint ----------------------------------------------------------

    def clear_interrupted_checkpoint_writes(self) -> list[str]:
        """Remove what a kill -9 in the middle of a checkpoint write leaves behind.

        Spark writes ``offsets/N`` and ``commits/N`` as ``.N.<uuid>.tmp`` (plus its
        ``.crc``) and renames it. A leftover temp file is never read back, but before the
        first batch Spark requires ``offsets`` and ``commits`` to be empty and refuses to
        start (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY) for ever. Only called while this
        merger holds the state directory, so no Spark write is under way."""
        removed = []
        for sub in ("offsets", "commits"):
            d = self.checkpoint / sub
            if not d.is_dir():
                continue
            for p in d.iterdir():
                if p.name.startswith(".") and (p.name.endswith(".tmp") or p.name.endswith(".tmp.crc")):
                    p.unlink(missing_ok=True)
                    removed.append(f"{sub}/{p.name}")
        return removed

    # -- batch state ---------------------------------------------------------------

    def save_batch(self, batch_id: int, state: dict) -> None:
        """The state after batch ``batch_id``: a delta on the state this store wrote or
        loaded last (``merger.state.chain``), or a full state. Only the files the newest
        three states need are kept."""
        record, self._chain, _ = state_chain.encode(batch_id, state, self._chain, self._spec_texts, self._entry_texts)
        atomic_write_json(self._state_path(batch_id), record)
        self._full_of[batch_id] = self._chain.full_id
        ids = self._state_ids()
        newest = ids[-3:]
        if all(i in self._full_of for i in newest):
            keep_from = min(self._full_of[i] for i in newest)
            for i in ids:
                if i < keep_from:
                    self._state_path(i).unlink(missing_ok=True)
                    self._full_of.pop(i, None)
        for p in self.batches.glob("intent-*.json"):
            if int(p.stem.split("-")[1]) < batch_id - 2:
                p.unlink(missing_ok=True)

    def load_before(self, batch_id: int) -> dict | None:
        """The state saved by the newest batch before ``batch_id`` (a re-run batch
        starts again from the state its predecessor left): its chain read back to the
        full state it starts from. The next ``save_batch`` writes a delta on it."""
        candidates = [i for i in self._state_ids() if i < batch_id]
        if not candidates:
            return None
        newest = max(candidates)
        chain, full_id = [read_json(self._state_path(newest))], newest
        while "prev" in chain[-1]:
            prev = full_id = int(chain[-1]["prev"])
            record = read_json(self._state_path(prev))
            if record is None:
                raise MergerError(
                    f"the merger's state in {self.batches} is incomplete: state-{prev:012d}.json, which the "
                    f"state of batch {newest} builds on, is missing. Start the merger with a new state_dir "
                    f"(every table is snapshotted again)"
                )
            chain.append(record)
        state = state_chain.apply(chain[-1], list(reversed(chain[:-1])))
        self._chain = state_chain.loaded_base(newest, full_id, len(chain), state)
        self._full_of[newest] = full_id
        return state

    def _state_path(self, batch_id: int) -> Path:
        return self.batches / f"state-{batch_id:012d}.json"

    def _state_ids(self) -> list[int]:
        return sorted(int(p.stem.split("-")[1]) for p in self.batches.glob("state-*.json"))

    def intent(self, batch_id: int) -> dict | None:
        return read_json(self.batches / f"intent-{batch_id:012d}.json")

    def save_intent(self, batch_id: int, intent: dict) -> None:
        atomic_write_json(self.batches / f"intent-{batch_id:012d}.json", intent)

    # -- sink versions -------------------------------------------------------------------

    def version_base(self, table: str, compute) -> int:
        """The table's sink version base (``merger.batch.sink_writer``): the stored
        one, or ``compute()`` stored now, before the table's first write of this state."""
        path = self.root / "version_bases.json"
        if self._version_bases is None:  # this merger is the file's only writer (the state lock)
            self._version_bases = read_json(path, {})
        bases = self._version_bases
        if table not in bases:
            bases[table] = int(compute())
            atomic_write_json(path, bases)
        return int(bases[table])

    # -- snapshot plans --------------------------------------------------------------

    def plan_path(self, table: str) -> Path:
        return self.plans / f"{safe_name(table)}.json"

    def load_plan(self, table: str) -> dict | None:
        return self._read_plan(self.plan_path(table))

    def save_plan(self, table: str, plan: dict) -> None:
        atomic_write_json(self.plan_path(table), plan)

    def refuse_repair(self, table: str, repair_id: str, error: str) -> None:
        """A repair the merger cannot run: its reason, for `cdc repair` to report (the
        table's snapshot plan is left as it is)."""
        atomic_write_json(
            self.plans / f"{safe_name(table)}.repair-refused",
            {"repair_id": repair_id, "error": error, "at": time.time()},
        )

    def repair_refusal(self, table: str, repair_id: str) -> str | None:
        """Why the merger refused the repair ``repair_id`` of ``table`` (None: it did not)."""
        found = read_json(self.plans / f"{safe_name(table)}.repair-refused", {})
        return found.get("error") if found.get("repair_id") == repair_id else None

    def all_plans(self) -> dict[str, dict]:
        """Every table's plan, new dicts."""
        return {table: json.loads(text) for table, (text, _) in self._plan_index().items()}

    def unfinished_plans(self) -> dict[str, dict]:
        """The plans of snapshots still running (not finished, cancelled or paused), new dicts."""
        return {
            table: json.loads(text)
            for table, (text, summary) in self._plan_index().items()
            if summary["snapshot"] == "running"
        }

    def plan_summaries(self) -> dict[str, dict]:
        """Per table: its latest snapshot's state (``plan_state``) and chunk counts, for the
        status. Not to be changed by the caller."""
        return {table: summary for table, (_, summary) in self._plan_index().items()}

    def _plan_index(self) -> dict[str, tuple[str, dict]]:
        """table -> (its plan's text, its summary). The plan directory is listed again only
        when it changed: plans are replaced by a rename, which changes the directory's time.
        With 500 tables, a listing and 500 plans read on each pass of the snapshot runner
        and each status was 18 % of the merger's time while one table changed (issue 23).
        A directory time within a second of the listing is not trusted (file times come
        from a clock that advances in ticks): it is listed again next time."""
        now_ns = time.time_ns()
        try:
            mtime = self.plans.stat().st_mtime_ns
        except FileNotFoundError:
            return {}
        if self._plans_listed is not None and self._plans_listed[0] == mtime:
            return self._plans_listed[2]
        index = {}
        for path in self.plans.glob("*.json"):
            text = self._plan_text(path)
            if text is None:
                continue
            summary = self._plan_summaries.get(text)
            if summary is None:
                plan = json.loads(text)
                summary = {
                    "table": plan.get("table"),
                    "snapshot": plan_state(plan),
                    "chunks_done": len(plan.get("done", [])),
                    "chunks_total": len(plan.get("chunks", [])),
                }
                shards = shard_chunks(plan)
                if shards:
                    summary["shards"] = shards
            index[summary["table"]] = (text, summary)
        self._plan_summaries = {text: summary for text, summary in index.values()}
        trusted = now_ns - mtime > 1_000_000_000
        self._plans_listed = (mtime if trusted else None, now_ns, index)
        return index

    def _read_plan(self, path: Path) -> dict | None:
        """A plan file's content, a new dict each time (callers change it)."""
        text = self._plan_text(path)
        return None if text is None else json.loads(text)

    def _plan_text(self, path: Path) -> str | None:
        """A plan file's text, read again only when the file changed (a plan is replaced,
        never written in place: its inode, time or size differ)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            self._plan_texts.pop(path, None)
            return None
        identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._plan_texts.get(path)
        if cached is None or cached[0] != identity:
            try:
                cached = (identity, path.read_text())
            except FileNotFoundError:
                return None
            self._plan_texts[path] = cached
        return cached[1]

    def staging_dir(self, table: str, window_id: str) -> Path:
        return self.staging / safe_name(table) / window_id

    STAGED = "_cdc_staged"

    def mark_staged(self, table: str, window_id: str, columns: list[tuple[str, str]] | None = None) -> None:
        """The window's rows are completely on disk (a restarted merger trusts them).
        ``columns``: the (name, Arrow type) the rows were read with, which the emission
        checks against the table's definition then."""
        (self.staging_dir(table, window_id) / self.STAGED).write_text(json.dumps(columns or []))

    def staged_columns(self, table: str, window_id: str) -> list[tuple[str, str]] | None:
        """The columns a staged window was read with; None when not recorded."""
        try:
            columns = json.loads((self.staging_dir(table, window_id) / self.STAGED).read_text() or "[]")
        except (OSError, ValueError):
            return None
        return [tuple(c) for c in columns] or None

    def is_staged(self, table: str, window_id: str) -> bool:
        return (self.staging_dir(table, window_id) / self.STAGED).exists()

    # -- status and control ------------------------------------------------------------

    def write_status(self, status: dict) -> None:
        """The status (``updated_at``: when). Written again only when more than its time
        changed; otherwise the file's time says when (``read_status`` takes the later):
        encoding 500 tables' status each second of an idle merger was half the driver's
        CPU (issue 23)."""
        path = self.root / "status.json"
        content = {k: v for k, v in status.items() if k != "updated_at"}
        if content == self._status_written:
            try:
                os.utime(path)
                return
            except OSError:
                pass  # gone: written again
        atomic_write_json(path, status, durable=False)
        self._status_written = content

    def read_status(self) -> dict | None:
        """The last status, ``updated_at`` the later of its own and its file's time."""
        path = self.root / "status.json"
        try:
            st = json.loads(path.read_text())
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return None
        if isinstance(st, dict):
            st["updated_at"] = max(float(st.get("updated_at") or 0), mtime)
        return st

    def request(self, action: str, table: str, **args) -> Path:
        path = self.control / f"{time.time_ns()}-{uuid.uuid4().hex[:6]}.json"
        atomic_write_json(path, {"action": action, "table": table, "args": args, "ts": time.time()})
        return path

    def take_requests(self, leave: Callable[[dict], bool] | None = None) -> list[dict]:
        """The operators' requests, oldest first, each taken once; those ``leave`` says
        must wait stay on disk (taken by a later call, or by the merger after a restart)."""
        out = []
        for p in sorted(self.control.glob("*.json")):
            data = read_json(p)
            if data and leave is not None and leave(data):
                continue
            p.unlink(missing_ok=True)
            if data:
                out.append(data)
        return out


def plan_state(plan: dict) -> str | None:
    """none | running | paused | cancelled | finished: a table's latest snapshot plan."""
    if not plan:
        return None
    if plan.get("cancelled"):
        return "cancelled"
    if plan.get("finished_at"):
        return "finished"
    return "paused" if plan.get("paused") else "running"


def shard_chunks(plan: dict) -> dict[str, list[int]]:
    """A sharded source's snapshot plan: per shard, ``[chunks done, chunks]`` (empty for one server)."""
    done = set(plan.get("done", []))
    out: dict[str, list[int]] = {}
    for chunk in plan.get("chunks", []):
        shard = (chunk.get("origin") or {}).get("shard") if isinstance(chunk, dict) else None
        if shard is None:
            continue
        counts = out.setdefault(shard, [0, 0])
        counts[0] += chunk["id"] in done
        counts[1] += 1
    return out
