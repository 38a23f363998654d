"""`cdc verify`: which tables and sinks to verify, and the report (a table or JSON).

Exit codes: 0 every sink table equals its source; 1 a difference was found; 2 a table
could not be verified (no key) and nothing differed; 3 nothing differed and nothing failed,
but a sink was skipped for some table (nothing compared for it: a run that verified
nothing is not a success). Unreachable servers and bad options end earlier, with one line
and exit code 2 (cdc.cli).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from cdc.config import ConfigError, MergerConfig


def parse_duration(text: str, option: str = "--retry-wait") -> float:
    """'2s', '500ms', '1m', '1.5' (seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", str(text))
    if not m:
        raise ConfigError(f"{option}: {text!r} is not a duration (e.g. 2s, 500ms, 1m)")
    value = float(m.group(1))
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


def parse_compare(text: str) -> bool:
    """--compare digest|rows -> whether chunks are compared by SQL digests first."""
    if text not in ("digest", "rows"):
        raise ConfigError(f"--compare: {text!r} is not digest or rows")
    return text == "digest"


def open_sinks(cfg: MergerConfig, only: str | None) -> dict[str, Any]:
    """Readers of the configured sinks by name (``merger.verify.sinks.registry``: each sink's
    own client); None for a sink that cannot be read by key range."""
    from merger.verify.sinks.registry import configured as configured_sinks
    from merger.verify.sinks.registry import readable, sink_reader

    names = readable()
    configured = configured_sinks(cfg.sinks)
    if only is not None:
        if only not in names:
            raise ConfigError(f"--sink: {only!r} is not one of {', '.join(names)}")
        if only not in configured:
            raise ConfigError(f"--sink {only}: the config has no sinks.{only}")
        configured = [only]
    if not configured:
        raise ConfigError("sinks: the config names no sink to verify")
    # a sink that cannot be read by key range (changelog topics are read whole): None
    return {name: sink_reader(name, cfg.sinks) if name in names else None for name in configured}


def resolve_tables(cfg: MergerConfig, source_tables: Sequence[str], named: Sequence[str]) -> list[str]:
    from merger.verify.chunked import merger_tables

    handled = merger_tables(source_tables, cfg.table_include, cfg.table_exclude, cfg.watermark_table)
    if not named:
        if not handled:
            raise ConfigError("no table of the source matches table_include/table_exclude: nothing to verify")
        return handled
    known = set(source_tables)
    for t in named:
        if t not in known:
            raise ConfigError(f"unknown table {t}: the source has no such table")
        if t not in handled:
            raise ConfigError(
                f"table {t} is not handled by the merger (table_include/table_exclude, or it is the watermark table)"
            )
    return list(dict.fromkeys(named))


EXIT_EQUAL, EXIT_DIFFERENT, EXIT_NOT_VERIFIED, EXIT_SKIPPED = 0, 1, 2, 3


def exit_code(results) -> int:
    verdicts = {r.verdict for r in results}
    if "different" in verdicts:
        return EXIT_DIFFERENT
    if "error" in verdicts:
        return EXIT_NOT_VERIFIED
    return EXIT_SKIPPED if "skipped" in verdicts else EXIT_EQUAL


def skipped_line(results) -> str | None:
    """One line: which sinks were skipped for which tables, why, and what to do."""
    by_reason: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.skipped:
            by_reason.setdefault((r.sink, r.note or "skipped"), []).append(r.table)
    if not by_reason:
        return None
    from merger.verify.sinks.registry import readable

    parts = [
        f"sink {sink} for {len(tables)} table(s) ({', '.join(tables)}): {why}"
        for (sink, why), tables in by_reason.items()
    ]
    only = " or ".join(f"--sink {n}" for n in readable())
    return (
        "nothing was compared for "
        + "; ".join(parts)
        + f" (exit code {EXIT_SKIPPED}; {only} verifies only the sinks that can be read)"
    )


@dataclass(frozen=True)
class VerifyOptions:
    """How `cdc verify` (and `cdc repair`'s verify) compares: the command's options."""

    sink: str | None = None  # one sink only
    chunk_size: int | None = None  # None: snapshot.chunk_size
    retries: int = 3
    retry_wait: float = 2.0
    limit: int = 20  # differing keys listed per table and sink
    digests: bool = True  # False: --compare rows
    consistent: bool | None = None  # None: when a merger runs


def run_verify(cfg: MergerConfig, named: Sequence[str], opts: VerifyOptions, as_json: bool, err: Console) -> int:
    """`cdc verify`: the results reported; the exit code."""
    return report(verify_tables(cfg, named, opts, err), as_json, err)


def confirmer_for(cfg: MergerConfig, consistent: bool | None):
    """A ``merger.verify.consistent.Confirmer`` (differences confirmed at a known position in
    verify windows), or None (re-read after ``--retry-wait``). ``consistent`` None: one when
    the running merger can report its windows; True: one, or the reason it cannot be."""
    from merger.state.store import StateStore, batch_prompter

    if consistent is False:  # --no-consistent: the timed re-read, even with a merger running
        return None
    why = None
    if cfg.source_connector != "ingest":
        why = "the topics are written by Debezium (no verify windows in them)"
    elif cfg.shards or cfg.routes:
        why = "a sharded or routed source (not built yet)"
    else:
        store = StateStore(cfg.state_dir)
        if store.running_merger() is None:
            why = f"no merger runs on state_dir {cfg.state_dir}"
    if why is not None:
        if consistent:
            raise ConfigError(f"--consistent: {why}; run it without --consistent")
        return None
    from merger.mysql.source import WatermarkWriter
    from merger.verify.consistent import Confirmer, NotConfirmed

    prompt = batch_prompter(store, cfg.min_batch_gap_ms)  # the merger reads the window's watermarks at once
    watermarks = WatermarkWriter(cfg.mysql, cfg.watermark_table, before_write=prompt)

    def window_status(table: str, window_id: str) -> dict | None:
        t = ((store.read_status() or {}).get("tables") or {}).get(table) or {}
        if t.get("phase") == "paused":
            raise NotConfirmed(
                f"{table} is paused in the merger (`cdc status` says why): differences cannot be confirmed"
            )
        found = (t.get("verify_windows") or {}).get(window_id)
        return None if found is None else {**found, "partitions": t.get("partitions")}

    return Confirmer(watermarks.write, window_status, timeout=max(60.0, cfg.snapshot.window_timeout_s))


def verify_tables(cfg: MergerConfig, named: Sequence[str], opts: VerifyOptions, err: Console) -> list:
    """Each table against each sink (``merger.verify.chunked.TableResult`` per table and sink)."""
    from cdc.config import routes_of
    from merger.schema.catalog import ShardedCatalog, SourceCatalog
    from merger.verify.chunked import TableResult, TableVerifier
    from merger.verify.current_versions import reader_for_mode
    from merger.verify.sinks.registry import why_not
    from merger.verify.source import SourceReader

    routed = bool(cfg.shards or cfg.routes)
    if routed:  # logical tables, each the union of its origins (docs/sharding.md), as the merger reads them
        servers = {s.name: s.mysql for s in cfg.shards} or {None: cfg.mysql}
        catalog = ShardedCatalog(servers, routes_of(cfg), guard=_no_retries())
    else:
        catalog = SourceCatalog(cfg.mysql, guard=_no_retries())
    try:
        tables = resolve_tables(cfg, catalog.list_tables(), named)
    except BaseException:
        catalog.close()
        raise
    sinks = open_sinks(cfg, opts.sink)
    readable = {n: s for n, s in sinks.items() if s is not None}
    confirm = confirmer_for(cfg, opts.consistent)
    sources: dict = {}  # shard name (None: the one server) -> SourceReader

    def source_of(shard, mysql):
        if shard not in sources:
            sources[shard] = SourceReader(mysql)
        return sources[shard]

    results: list = []
    progress = _progress(err)
    try:
        with progress:
            for name in tables:
                # an SCD type 2 table by its current versions; a change log has no latest state to compare
                viewed = {n: reader_for_mode(r, cfg.sinks.table_mode(n, name)) for n, r in readable.items()}
                compared = {n: r for n, r in viewed.items() if r is not None}
                task = progress.add_task(f"{name}: planning", total=None, rows=0)

                def advance(table, done, total, rows, task=task):
                    progress.update(task, description=table, completed=done, total=total, rows=rows)

                def verify(source, table, **where):
                    keys, error = _chunk_keys(cfg, name, table)
                    if error:
                        return [TableResult(table.name if table else name, n, error=error) for n in compared]
                    verifier = TableVerifier(
                        source,
                        table,
                        keys,
                        compared,
                        opts.chunk_size or cfg.snapshot.chunk_size,
                        retries=opts.retries,
                        retry_wait=opts.retry_wait,
                        limit=opts.limit,
                        on_progress=advance,
                        digests=opts.digests,
                        confirm=confirm,
                        **where,
                    )
                    return verifier.run() if compared else []

                if routed and cfg.key_mode == "unique":
                    results += _verify_owned(name, catalog.origins(name), source_of, compared, verify, cfg)
                elif routed:
                    results += _verify_origins(name, catalog.origins(name), source_of, compared, verify, opts.limit)
                else:
                    db, tname = name.split(".", 1)
                    source = source_of(None, cfg.mysql)
                    results += verify(source, source.describe(db, tname))
                results += [TableResult(name, n, skipped=True, note=why_not(n)) for n, s in sinks.items() if s is None]
                results += [
                    TableResult(
                        name,
                        n,
                        skipped=True,
                        note=f"a {cfg.sinks.table_mode(n, name)} table (sinks.{n}.tables): no latest state to compare",
                    )
                    for n in readable
                    if n not in compared
                ]
                progress.remove_task(task)
    finally:
        catalog.close()
        for source in sources.values():
            source.close()
        for s in readable.values():
            try:
                s.close()
            except Exception:
                pass
    return results


def _verify_owned(name: str, origins, source_of, readable: dict, verify, cfg: MergerConfig) -> list:
    """One logical table in key mode unique: the sink table by the source key, without the
    origin column, against the union of the origins' rows that their shards own
    (``merger.verify.union_source``)."""
    from merger.verify.chunked import TableResult
    from merger.verify.source import SourceReadError
    from merger.verify.union_source import CUTOVER_TABLE, union_of

    cutover_table = f"{cfg.watermark_table.split('.', 1)[0]}.{CUTOVER_TABLE}"
    try:
        union, table = union_of(
            name, [(o.shard, o.db, o.table, source_of(o.shard, o.mysql)) for o in origins], cutover_table
        )
    except SourceReadError as exc:
        return [TableResult(name, n, error=str(exc)) for n in readable]
    try:
        results = verify(union, table, target=tuple(name.split(".", 1)))
    finally:
        union.close()
    for r in results:
        r.table = name
    return results


def _verify_origins(name: str, origins, source_of, readable: dict, verify, limit: int) -> list:
    """One logical table of a sharded (or routed) source: each origin's physical table on its
    shard against the sink rows of that origin, merged into one result per sink
    (``merger.verify.sharded``)."""
    from cdc.routes import ORIGIN_COLUMN
    from merger.verify.sharded import add_strays, merge_results, stray_origins
    from merger.verify.sinks.base import SinkUnreachable

    target = tuple(name.split(".", 1))
    parts: dict[str, list] = {n: [] for n in readable}
    for origin in origins:
        source = source_of(origin.shard, origin.mysql)
        table = source.describe(origin.db, origin.table)
        fixed = {"fixed": (ORIGIN_COLUMN, origin.name)} if origin.name is not None else {}
        for r in verify(source, table, target=target, **fixed):
            parts[r.sink].append((origin.name, r))
    out = []
    for sink, done in parts.items():
        result = merge_results(name, sink, done, limit)
        if origins and origins[0].name is not None and not result.error:
            reader = readable[sink]
            try:
                cols = reader.columns(*target)
                if cols is not None and ORIGIN_COLUMN in cols:
                    counts = reader.value_counts(*target, ORIGIN_COLUMN)
                    add_strays(result, ORIGIN_COLUMN, stray_origins(counts, [o.name for o in origins]))
            except SinkUnreachable:
                raise
            except Exception as exc:  # noqa: BLE001 - reported for the table
                result.error = f"reading the origins of the sink rows: {exc}"
        out.append(result)
    return out


def _progress(err: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rows]:,} source rows"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def _chunk_keys(cfg: MergerConfig, name: str, table) -> tuple[list[str], str | None]:
    """The key verify cuts chunks by (the primary key, else snapshot.chunk_keys), or why
    the table cannot be verified."""
    if table is None:
        return [], "the table disappeared from the source"
    from cdc.routes import ORIGIN_COLUMN

    # a sharded source's origin: the physical key (the origin column is the sink rows' filter)
    keys = list(table.primary_key) or [k for k in cfg.snapshot.chunk_keys.get(name, []) if k != ORIGIN_COLUMN]
    if not keys:
        return [], (
            f"{name} has no primary key: set snapshot.chunk_keys "
            f'{{"{name}": [columns]}} (NOT NULL columns, unique together)'
        )
    unknown = [k for k in keys if k not in table.column_names]
    if unknown:
        return keys, f"snapshot.chunk_keys of {name}: no column(s) {unknown} in the source table"
    return keys, None


def report(results: list, as_json: bool, err: Console) -> int:
    """Prints the results (a table, or JSON; what was skipped, on stderr) and returns the exit code."""
    code = exit_code(results)
    skipped = skipped_line(results)
    if skipped:
        err.print(escape(skipped), highlight=False, soft_wrap=True)
    if as_json:
        print(
            json.dumps(
                {"ok": code == 0, "exit_code": code, "tables": [r.to_json() for r in results]},
                indent=2,
                default=_json_value,
            )
        )
    else:
        out = Console()
        render(results, out if out.is_terminal else Console(width=200))  # a log or pipe: no wrapping
    return code


def _no_retries():
    """A source guard that gives up at once: an operator's command reports an unreachable
    server in one line instead of waiting for it."""
    import threading

    from merger.mysql.source import SourceGuard

    stop = threading.Event()
    stop.set()
    return SourceGuard(stop=stop)


def _json_value(v: Any) -> Any:
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return str(v)


def _key_text(key: tuple) -> str:
    return str(key[0]) if len(key) == 1 else "(" + ", ".join(str(v) for v in key) + ")"


def render(results, console: Console) -> None:
    table = Table(title="cdc verify")
    for col, justify in (
        ("table", "left"),
        ("sink", "left"),
        ("chunks", "right"),
        ("source rows", "right"),
        ("sink rows", "right"),
        ("mismatched chunks", "right"),
        ("by digest", "right"),
        ("verdict", "left"),
    ):
        # names in full (folded), never cut to "…"
        table.add_column(col, justify=justify, overflow="fold")
    colour = {"equal": "green", "different": "red", "error": "red", "skipped": "yellow"}
    for r in results:
        table.add_row(
            r.table,
            r.sink,
            str(r.chunks),
            f"{r.source_rows:,}",
            f"{r.sink_rows:,}",
            str(r.mismatched_chunks),
            str(r.digest_chunks),
            f"[{colour[r.verdict]}]{r.verdict}",
        )
    console.print(table)
    for r in results:
        lines = []
        if r.error:
            lines.append(f"error: {r.error}")
        if r.note and not r.skipped:
            lines.append(r.note)
        if r.nul_note:
            lines.append(r.nul_note)
        if r.missing:
            lines.append("missing in the sink: " + ", ".join(_key_text(k) for k in r.missing))
        if r.extra:
            lines.append("extra in the sink: " + ", ".join(_key_text(k) for k in r.extra))
        if r.different:
            lines.append("different values: " + ", ".join(f"{_key_text(k)} [{', '.join(c)}]" for k, c in r.different))
        if r.unlisted:
            lines.append(f"... and {r.unlisted} more differing keys")
        if r.row_path and not r.skipped and not r.error:
            lines.append(f"compared row by row: {r.row_path}")
        if r.narrowed_chunks and r.verdict != "error":
            lines.append(
                f"{r.narrowed_chunks} chunk(s) whose digests differed were narrowed by sub-range digests "
                "to the rows compared"
            )
        if r.in_flight_chunks and r.verdict != "error":
            how = "in a verify window" if r.confirmed_at is not None else "on re-check"
            lines.append(f"{r.in_flight_chunks} chunk(s) differed at first and settled {how} (rows in flight)")
        if r.confirmed_at is not None and r.verdict != "error":
            lines.append(f"differences confirmed at a known position (the last verify window's LOW: {r.confirmed_at})")
        if r.changing:
            lines.append(f"{r.changing} key(s) changed in every verify window: not checked in this run")
        lines += [f.line() for f in r.history_faults]
        if lines:
            console.print(f"[bold]{escape(r.table)} / {r.sink}[/bold]")
            for line in lines:
                console.print("  " + escape(line), highlight=False)
