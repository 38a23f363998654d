"""`cdc repair` and `cdc verify --repair`: verify, hand the differing keys to the running
merger as a repair (key-list DBLog windows: ``merger.snapshot.repair``), wait for it, report
what it changed per table and sink, and verify again.

The keys come from verify (canonical values, ``merger.verify.keys``) and go to the merger
as the source's own values; the merger re-reads them between watermarks and deletes the
asked keys the source no longer holds. Nothing is written to the source but watermarks.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from rich.console import Console
from rich.table import Table

from cdc.cli.verify import VerifyOptions
from cdc.config import ConfigError, MergerConfig

REPAIR_LIMIT = 100_000  # differing keys listed per table and sink when repairing
WHERE_LIMIT = 100_000  # rows a --where repair re-reads at most
POLL_S = 0.5


@dataclass
class TableRepair:
    """One table's repair: the keys asked for, what verify found per sink, what the merger did."""

    table: str
    keys: list = field(default_factory=list)  # key tuples, the source's values
    found: dict = field(default_factory=dict)  # sink -> {"inserted": n, "updated": n, "deleted": n}
    unlisted: int = 0  # differing keys beyond the limit: not repaired in this run
    error: str | None = None
    rows_read: int = 0  # rows re-read from the source and written (the merger's count)
    rows_deleted: int = 0  # keys the source no longer holds, deleted (the merger's count)
    seconds: float = 0.0
    files_forgotten: int = 0  # Delta data files missing from storage, removed from the table's log

    def to_json(self) -> dict:
        return {
            "table": self.table,
            "keys": len(self.keys),
            "by_sink": self.found,
            "unlisted": self.unlisted,
            "error": self.error,
            "rows_read": self.rows_read,
            "rows_deleted": self.rows_deleted,
            "seconds": round(self.seconds, 3),
            "delta_files_forgotten": self.files_forgotten,
        }


def plan_repairs(results: Sequence[Any]) -> list[TableRepair]:
    """The repairs verify's results ask for, one per table with differences (pure): the union
    of the differing keys of every sink, as source values."""
    from merger.snapshot.repair import RepairError, differing_keys

    repairs: dict[str, TableRepair] = {}
    for r in results:
        if r.verdict != "different":
            continue
        rep = repairs.setdefault(r.table, TableRepair(r.table))
        rep.found[r.sink] = {"inserted": len(r.missing), "updated": len(r.different), "deleted": len(r.extra)}
        rep.unlisted += r.unlisted
        try:
            keys = differing_keys(r)
        except RepairError as exc:
            rep.error = str(exc)
            continue
        if not keys and r.note and rep.error is None:
            rep.error = f"sink {r.sink}: {r.note}"
        if not keys and r.history_faults and rep.error is None:
            rep.error = (
                f"sink {r.sink}: the SCD type 2 history's shape is faulty ({sum(f.count for f in r.history_faults)} "
                "faults, listed by verify): repair re-reads rows, it does not rewrite versions (docs/history.md)"
            )
        rep.keys = list(dict.fromkeys([*rep.keys, *keys]))
    return list(repairs.values())


def wait_for_repair(
    store, table: str, repair_id: str, timeout: float, on_progress: Callable[[int, int], None] | None = None
) -> dict:
    """The finished plan of the repair ``repair_id`` of ``table``; raises ConfigError when it
    fails, or does not finish within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    plan: dict | None = None
    while time.monotonic() < deadline:
        refused = store.repair_refusal(table, repair_id)
        if refused:
            raise ConfigError(refused)
        plan = store.load_plan(table)
        if plan is not None and plan.get("repair_id") == repair_id:
            if plan.get("error"):
                raise ConfigError(plan["error"])
            if on_progress:
                on_progress(len(plan.get("done", [])), len(plan.get("chunks", [])))
            if plan.get("finished_at"):
                return plan
            if plan.get("cancelled"):
                raise ConfigError(f"the repair of {table} was cancelled (`cdc snapshot {table} --cancel`)")
        if store.running_merger() is None:
            raise ConfigError(f"the merger stopped before the repair of {table} finished: start it, then repair again")
        time.sleep(POLL_S)
    taken = plan is not None and plan.get("repair_id") == repair_id
    where = (
        f"{len(plan.get('done', []))} of {len(plan.get('chunks', []))} windows done; it goes on in the merger"
        if taken
        else "the merger has not started it (a snapshot of the table may still be running)"
    )
    raise ConfigError(f"the repair of {table} did not finish within {timeout:.0f}s ({where}); `cdc status` shows it")


def run_repairs(store, repairs: list[TableRepair], timeout: float, err: Console) -> None:
    """Each repair handed to the merger and waited for (errors are kept per table)."""
    from merger.dblog import encode_key

    for rep in repairs:
        if rep.error or not rep.keys:
            continue
        repair_id = uuid.uuid4().hex
        started = time.monotonic()
        store.request("repair", rep.table, keys=[encode_key(k) for k in rep.keys], id=repair_id)
        with err.status(f"repairing {rep.table}: {len(rep.keys)} keys") as status:

            def progress(done: int, total: int) -> None:
                status.update(f"repairing {rep.table}: {len(rep.keys)} keys, window {done} of {total}")

            try:
                plan = wait_for_repair(store, rep.table, repair_id, timeout, progress)
            except ConfigError as exc:
                rep.error = str(exc)
                continue
        rep.rows_read, rep.rows_deleted = plan.get("rows", 0), plan.get("deleted", 0)
        rep.seconds = time.monotonic() - started


def forget_missing_delta_files(cfg: MergerConfig, tables: Sequence[str]) -> dict[str, int]:
    """Per table, the data files a Delta table's log names that storage no longer holds,
    removed from its log (their rows are then missing: the repair reads them again)."""
    from merger.sinks.base import SinkError
    from merger.sinks.registry import build_sinks

    (sink,) = build_sinks(cfg, only=("delta",))
    out = {}
    for table in tables:
        try:
            removed = sink.forget_missing_files(tuple(table.split(".", 1)))
        except SinkError as exc:
            raise ConfigError(f"checking the Delta table of {table} for missing files: {exc}") from None
        if removed:
            out[table] = len(removed)
    return out


def resume_paused(store, tables: Sequence[str], timeout: float) -> None:
    """Resume those of ``tables`` the merger paused (a Delta table whose data file went
    missing is paused until its log is mended) and wait until it runs them again."""
    status = (store.read_status() or {}).get("tables", {})
    paused = [t for t in tables if (status.get(t) or {}).get("phase") == "paused"]
    for table in paused:
        store.request("resume", table)
    deadline = time.monotonic() + timeout
    while paused and time.monotonic() < deadline:
        status = (store.read_status() or {}).get("tables", {})
        paused = [t for t in paused if (status.get(t) or {}).get("phase") == "paused"]
        time.sleep(POLL_S)
    if paused:
        raise ConfigError(f"the merger did not resume {', '.join(paused)} within {timeout:.0f}s: `cdc status` says why")


def render_repairs(repairs: list[TableRepair], console: Console) -> None:
    table = Table(title="repair")
    for col in ("table", "sink", "inserted", "updated", "deleted", "note"):
        table.add_column(col)
    for rep in repairs:
        note = rep.error or (
            f"{len(rep.keys)} keys re-read in {rep.seconds:.1f}s: {rep.rows_read} rows written, "
            f"{rep.rows_deleted} deleted"
        )
        if rep.files_forgotten:
            note += f"; {rep.files_forgotten} Delta data files missing from storage removed from the log"
        if rep.unlisted and not rep.error:
            note += f"; {rep.unlisted} more differing keys beyond the limit: run it again"
        for i, (sink, n) in enumerate(sorted(rep.found.items())):
            table.add_row(
                rep.table if i == 0 else "",
                sink,
                str(n["inserted"]),
                str(n["updated"]),
                str(n["deleted"]),
                note if i == 0 else "",
            )
    console.print(table)


def run_repair(
    cfg: MergerConfig, named: Sequence[str], opts: VerifyOptions, as_json: bool, err: Console, timeout: float = 600.0
) -> int:
    """Verify, repair what differs, verify the repaired tables again; the exit code is the
    second verify's (0: equal now)."""
    from dataclasses import replace

    from cdc.cli.verify import report, verify_tables
    from merger.state.store import StateStore

    if cfg.source_connector != "ingest":
        raise ConfigError("repair needs the merger's own snapshot windows (source_connector: ingest)")
    if cfg.shards or cfg.routes:
        raise ConfigError("repair of sharded or routed tables is not built yet: `cdc snapshot` the table instead")
    store = StateStore(cfg.state_dir)
    if store.running_merger() is None:
        raise ConfigError(
            f"no merger runs on state_dir {cfg.state_dir}: repair is done by the running merger; start it"
        )
    finding = replace(opts, limit=max(opts.limit, REPAIR_LIMIT))
    results = verify_tables(cfg, named, finding, err)
    forgotten: dict[str, int] = {}
    if cfg.sinks.delta is not None and opts.sink in (None, "delta"):
        forgotten = forget_missing_delta_files(cfg, sorted({r.table for r in results if r.sink == "delta"}))
        if forgotten:  # their rows are missing now: resume the tables, find the rows again
            resume_paused(store, list(forgotten), timeout)
            again = verify_tables(cfg, list(forgotten), finding, err)
            results = [r for r in results if r.table not in forgotten] + again
    repairs = plan_repairs(results)
    for rep in repairs:
        rep.files_forgotten = forgotten.get(rep.table, 0)
    if not repairs:
        return report(results, as_json, err)
    run_repairs(store, repairs, timeout, err)
    after = verify_tables(cfg, [r.table for r in repairs], opts, err)
    others = [r for r in results if r.table not in {rep.table for rep in repairs}]
    if as_json:
        from cdc.cli.verify import exit_code

        code = exit_code(others + after)
        print(
            json.dumps(
                {
                    "ok": code == 0,
                    "exit_code": code,
                    "repairs": [r.to_json() for r in repairs],
                    "tables": [r.to_json() for r in others + after],
                },
                indent=2,
                default=str,
            )
        )
        return code
    out = Console() if Console().is_terminal else Console(width=200)
    render_repairs(repairs, out)
    failed = [r for r in repairs if r.error]
    for r in failed:
        err.print(f"[red]repair of {r.table} not done:[/red] {r.error}", highlight=False)
    return report(others + after, False, err)


def where_keys(cfg: MergerConfig, table: str, condition: str, sink: str | None) -> tuple[list[tuple], dict[str, int]]:
    """`cdc repair TABLE --where`: the keys of the source rows that meet ``condition`` and of
    each sink's rows that do (the condition run on each side, in its own SQL), as source
    values; and how many each side has."""
    from cdc.cli.verify import open_sinks
    from merger.verify.source import SourceReader, SourceReadError

    db, name = table.split(".", 1)
    source = SourceReader(cfg.mysql)
    readers = {n: r for n, r in open_sinks(cfg, sink).items() if r is not None}
    try:
        described = source.describe(db, name)
        if described is None:
            raise ConfigError(f"unknown table {table}: the source has no such table")
        keys = list(described.primary_key) or list(cfg.snapshot.chunk_keys.get(table, []))
        if not keys:
            raise ConfigError(f"{table} has no primary key: set snapshot.chunk_keys")
        cols = ", ".join(f"`{k.replace('`', '``')}`" for k in keys)
        try:
            found = {
                "source": source.query(f"SELECT {cols} FROM `{db}`.`{name}` WHERE {condition} LIMIT {WHERE_LIMIT + 1}")
            }
        except SourceReadError as exc:
            raise ConfigError(f"--where {condition!r} on the source: {exc}") from None
        for n, reader in readers.items():
            try:
                found[n] = reader.keys_where(db, name, keys, condition)
            except Exception as exc:  # noqa: BLE001 - the condition may not be that sink's SQL
                raise ConfigError(f"--where {condition!r} on sink {n}: {str(exc).splitlines()[0]}") from None
    finally:
        source.close()
        for r in readers.values():
            r.close()
    counts = {n: len(k) for n, k in found.items()}
    union = list(dict.fromkeys(tuple(_plain_key(v) for v in k) for ks in found.values() for k in ks))
    if len(union) > WHERE_LIMIT:
        raise ConfigError(
            f"--where {condition!r} names more than {WHERE_LIMIT:,} rows: narrow it, or `cdc snapshot {table} "
            "--where ...` (a re-read of the source that leaves rows only a sink holds)"
        )
    return union, counts


def _plain_key(v: Any) -> Any:
    """A key value a side returned, as the source's value (bytes from a memoryview)."""
    return bytes(v) if isinstance(v, (bytearray, memoryview)) else v


def run_where_repair(
    cfg: MergerConfig, table: str, condition: str, opts: VerifyOptions, timeout: float, as_json: bool, err: Console
) -> int:
    """`cdc repair TABLE --where COND`: every row either side holds that meets the condition
    is re-read (or deleted when the source lacks it), then the table is verified."""
    from cdc.cli.verify import report, verify_tables
    from merger.state.store import StateStore

    if cfg.source_connector != "ingest" or cfg.shards or cfg.routes:
        raise ConfigError("repair needs the merger's own windows on an unsharded source (source_connector: ingest)")
    store = StateStore(cfg.state_dir)
    if store.running_merger() is None:
        raise ConfigError(
            f"no merger runs on state_dir {cfg.state_dir}: repair is done by the running merger; start it"
        )
    keys, counts = where_keys(cfg, table, condition, opts.sink)
    rep = TableRepair(table, keys=keys, found={n: {"rows": c} for n, c in counts.items()})
    if keys:
        run_repairs(store, [rep], timeout, err)
    after = verify_tables(cfg, [table], opts, err)
    if as_json:
        from cdc.cli.verify import exit_code

        code = exit_code(after)
        print(
            json.dumps(
                {
                    "ok": code == 0,
                    "exit_code": code,
                    "repairs": [rep.to_json()],
                    "tables": [r.to_json() for r in after],
                },
                indent=2,
                default=str,
            )
        )
        return code
    err.print(
        f"repair of {table} where {condition}: {len(keys)} keys ("
        + ", ".join(f"{n} {c}" for n, c in counts.items())
        + f"); {rep.rows_read} rows re-read and written, {rep.rows_deleted} deleted"
        + (f"; not done: {rep.error}" if rep.error else ""),
        highlight=False,
    )
    return report(after, False, err)
