"""The `cdc` command line: run each part, manage the local stack, and the demo.

User mistakes end in one line on stderr and exit code 2, never a stack trace.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from cdc import stack as local_stack
from cdc.cli.native_exit import exit_now
from cdc.cli.prose import as_prose
from cdc.config import ConfigError, IngestConfig, load_model

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="MySQL/MariaDB change data capture: binlog -> Kafka (Debezium format) -> Spark-merged tables.",
)
stack_app = typer.Typer(
    no_args_is_help=True, help="The embedded local stack (MariaDB, Kafka-compatible broker, PostgreSQL)."
)
app.add_typer(stack_app, name="stack")
console = Console(stderr=True)

STATE_DIR_OPTION = typer.Option(
    local_stack.DEFAULT_STATE_DIR, "--state-dir", envvar="CDC_STATE_DIR", help="directory of the local stack's state"
)


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("pymysqlreplication", "py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# ------------------------------------------------------------------ stack


@stack_app.command("up")
def stack_up(
    state_dir: Path = STATE_DIR_OPTION,
    only: Optional[list[str]] = typer.Option(None, help="start only these: mariadb, kafka, postgres, s3"),
    s3: bool = typer.Option(
        False, "--s3", help="also start an S3-compatible object store (moto) with the bucket `cdc`, for Delta tables"
    ),
    shards: int = typer.Option(
        0,
        help="also start this many shard servers (MariaDB, server_id 100*i, GTID domain i), each with a "
        "GTID replica (server_id 100*i+1) to fail over to; listed in <state_dir>/shards.json",
    ),
    replicas: bool = typer.Option(True, help="with --shards: a replica for each shard"),
    spark_workers: int = typer.Option(
        0,
        help="also start a Spark standalone cluster: a master and this many workers (one core each), for "
        "`spark_master: spark://...` in the merger's config, with `spark_auth_secret_file: "
        "<state_dir>/secrets/spark_auth_secret` (it authenticates); listed in <state_dir>/spark.json",
    ),
):
    """Start the local stack (idempotent)."""
    from cdc import stack_shards, stack_spark

    components = tuple(only) if only else local_stack.COMPONENTS
    for name in components:
        if name not in local_stack.ALL_COMPONENTS:
            raise ConfigError(f"--only: unknown component {name!r}; allowed: {', '.join(local_stack.ALL_COMPONENTS)}")
    if s3 and "s3" not in components:
        components += ("s3",)
    info = local_stack.up(state_dir, components)
    if shards:
        stack_shards.up(state_dir, shards, replicas)
    if spark_workers:
        stack_spark.up(state_dir, spark_workers)
    _print_status(state_dir)
    if spark_workers:
        console.print(f"Spark cluster secret (spark_auth_secret_file): {stack_spark.auth_secret_file(state_dir)}")
    console.print(f"stack file: {info.path}")


@stack_app.command("down")
def stack_down(
    state_dir: Path = STATE_DIR_OPTION, purge: bool = typer.Option(False, help="also delete all data of the stack")
):
    """Stop what `cdc stack up` started."""
    from cdc import stack_shards, stack_spark

    stopped = stack_spark.down(state_dir)
    stopped += stack_shards.down(state_dir)
    stopped += local_stack.down(state_dir, purge=purge)
    console.print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@stack_app.command("status")
def stack_status(state_dir: Path = STATE_DIR_OPTION):
    """Show which parts of the local stack run, and where."""
    _print_status(state_dir)


def _print_status(state_dir: Path) -> None:
    info = local_stack.StackInfo.load(state_dir)
    table = Table(title="local stack")
    for col in ("component", "state", "pid", "address"):
        table.add_column(col)
    addresses = {
        "mariadb": f"{info.mariadb.host}:{info.mariadb.port}",
        "kafka": info.kafka.bootstrap,
        "postgres": f"{info.postgres.host}:{info.postgres.port}",
        "s3": f"{info.s3.endpoint} (bucket {info.s3.bucket})",
    }
    for name, st in local_stack.status(state_dir).items():
        table.add_row(
            name, "[green]running" if st["running"] else "[red]stopped", str(st["pid"] or "-"), addresses[name]
        )
    from cdc import stack_shards

    for name, st in stack_shards.status(state_dir).items():
        table.add_row(
            f"{name} (server_id {st['server_id']}, domain {st['domain_id']})",
            "[green]running" if st["running"] else "[red]stopped",
            str(st["pid"] or "-"),
            f"127.0.0.1:{st['port']}",
        )
    from cdc import stack_spark

    for name, st in stack_spark.status(state_dir).items():
        table.add_row(name, "[green]running" if st["running"] else "[red]stopped", str(st["pid"] or "-"), st["address"])
    Console().print(table)


# ------------------------------------------------------------------ ingest


def local_ingest_overrides(state_dir: Path) -> dict:
    """Connection settings of the local stack; the password goes through a file."""
    info = local_stack.StackInfo.load(state_dir)
    return {
        "mysql.host": info.mariadb.host,
        "mysql.port": info.mariadb.port,
        "mysql.user": info.mariadb.user,
        "mysql.password_file": str(local_stack.secret_file(info, "mysql_password")),
        "mysql.password_env": None,
        "kafka.bootstrap_servers": info.kafka.bootstrap,
    }


def load_ingest_config(config: Optional[Path], local: bool, state_dir: Path) -> IngestConfig:
    overrides = local_ingest_overrides(state_dir) if local else {}
    return load_model(IngestConfig, config, overrides)


@app.command()
def ingest(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="ingest YAML file"),
    local: bool = typer.Option(False, "--local", help="connect to the local stack (`cdc stack up`)"),
    state_dir: Path = STATE_DIR_OPTION,
    shard: Optional[str] = typer.Option(
        None, "--shard", help="a sharded source: follow this shard alone (its own position and lease)"
    ),
    verbose: bool = typer.Option(False, "-v"),
):
    """Read the binlog and write change events to Kafka (runs until stopped)."""
    from ingest.app import Ingest
    from ingest.shards import ShardedIngest

    _setup_logging(verbose)
    cfg = load_ingest_config(config, local, state_dir)
    if shard is not None and not cfg.shards:
        raise ConfigError("--shard: the config lists no shards")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    (ShardedIngest(cfg, only=shard) if cfg.shards else Ingest(cfg)).run(stop)


@app.command()
def tail(
    topic: str = typer.Argument(..., help="topic to show, e.g. cdc.shop.orders"),
    local: bool = typer.Option(True, "--local/--no-local"),
    bootstrap: Optional[str] = typer.Option(None, help="bootstrap servers (default: local stack)"),
    seconds: float = typer.Option(10.0, help="stop after this many seconds without new records"),
    state_dir: Path = STATE_DIR_OPTION,
):
    """Print the records of a topic as they arrive (read_committed)."""
    from cdc.cli.tail import tail_topic

    if not bootstrap:
        bootstrap = local_stack.StackInfo.load(state_dir).kafka.bootstrap
    tail_topic(bootstrap, topic, seconds, Console())


@app.command()
def demo(
    state_dir: Path = STATE_DIR_OPTION,
    rows: int = typer.Option(200_000, help="rows of the demo orders table (all shards together)"),
    shards: int = typer.Option(0, "--shards", help="a sharded source of this many shard servers (docs/sharding.md)"),
):
    """The whole path on the local stack: load tables, start ingest and the merger, snapshot
    while a live workload runs, show change events, compare every sink table with its source."""
    from cdc import stack_shards
    from cdc.cli.demo import run_demo

    _setup_logging(False)
    if shards < 0 or shards > stack_shards.MAX_SHARDS:
        raise ConfigError(f"--shards must be between 0 and {stack_shards.MAX_SHARDS}")
    run_demo(state_dir, rows, Console(), shards)


# ------------------------------------------------------------------ merger


def local_merger_overrides(state_dir: Path) -> dict:
    info = local_stack.StackInfo.load(state_dir)
    return {
        "mysql.host": info.mariadb.host,
        "mysql.port": info.mariadb.port,
        "mysql.user": "root",
        "mysql.password_file": str(local_stack.secret_file(info, "mysql_root_password")),
        "mysql.password_env": None,
        "sinks.postgres.password_env": None,
        "kafka.bootstrap_servers": info.kafka.bootstrap,
        "sinks.postgres.host": info.postgres.host,
        "sinks.postgres.port": info.postgres.port,
        "sinks.postgres.user": info.postgres.user,
        "sinks.postgres.dbname": info.postgres.database,
        "sinks.postgres.password_file": str(local_stack.secret_file(info, "postgres_password")),
    }


def load_merger_config(config: Optional[Path], local: bool, state_dir: Path):
    from cdc.config import MergerConfig

    overrides = local_merger_overrides(state_dir) if local else {}
    if local and config:
        import yaml

        raw = yaml.safe_load(Path(config).read_text()) or {}
        if "postgres" not in (raw.get("sinks") or {}):
            overrides = {k: v for k, v in overrides.items() if not k.startswith("sinks.postgres.")}
    elif local:
        overrides = {k: v for k, v in overrides.items() if not k.startswith("sinks.postgres.")}
    return load_model(MergerConfig, config, overrides)


CONFIG_OPTION = typer.Option(None, "--config", "-c", help="merger YAML file")


@app.command()
def merge(
    config: Optional[Path] = CONFIG_OPTION,
    local: bool = typer.Option(False, "--local", help="use the local stack's servers"),
    state_dir: Path = STATE_DIR_OPTION,
    verbose: bool = typer.Option(False, "-v"),
):
    """Run the merger (Spark Structured Streaming) until stopped."""
    from merger.app import Merger

    _setup_logging(verbose)
    cfg = load_merger_config(config, local, state_dir)
    merger = Merger(cfg)
    signal.signal(signal.SIGTERM, lambda *_: merger.stop_event.set())
    signal.signal(signal.SIGINT, lambda *_: merger.stop_event.set())
    merger.run()


STALE_STATUS_S = 30  # a running merger writes its status every second


def merger_state(pid: int | None, exit_record: dict | None, age_s: float) -> dict:
    """Is the merger behind a status file running, and if not, why did it end."""
    if pid is not None:
        stale = age_s > STALE_STATUS_S
        summary = (
            f"merger running (pid {pid})"
            if not stale
            else f"merger running (pid {pid}) but its status is {age_s:.0f}s old: it may be stuck"
        )
        return {"running": True, "pid": pid, "stale": stale, "summary": summary}
    if exit_record is None:
        reason = "it ended without saying why (killed?)"
    elif exit_record.get("reason") is None:
        reason = "it was stopped"
    else:
        reason = f"it failed: {exit_record['reason']}"
    ago = f" {time.time() - exit_record['at']:.0f}s ago" if exit_record else ""
    return {
        "running": False,
        "exit": exit_record,
        "stale": True,
        "summary": f"merger NOT RUNNING: {reason}{ago}; the table phases below are from when it ran",
    }


def _store(config: Optional[Path], local: bool, state_dir: Path):
    from merger.state.store import StateStore

    cfg = load_merger_config(config, local, state_dir)
    return StateStore(cfg.state_dir)


def _check_table(table: str) -> str:
    if table.count(".") < 1:
        raise ConfigError(f"table {table!r}: write it as <database>.<table>")
    return table


@app.command()
def snapshot(
    table: str = typer.Argument(..., help="<database>.<table>"),
    where: Optional[str] = typer.Option(None, help="SQL condition: snapshot only these rows"),
    pause: bool = typer.Option(False, "--pause", help="pause the running snapshot"),
    resume_: bool = typer.Option(False, "--resume", help="resume a paused snapshot"),
    cancel: bool = typer.Option(False, "--cancel", help="cancel the running snapshot"),
    shard: Optional[str] = typer.Option(
        None, "--shard", help="a sharded source: read only this shard's tables (e.g. a shard just added)"
    ),
    config: Optional[Path] = CONFIG_OPTION,
    local: bool = typer.Option(False, "--local"),
    state_dir: Path = STATE_DIR_OPTION,
):
    """Snapshot a table while streaming continues (or pause/resume/cancel its snapshot)."""
    action = "pause" if pause else "resume" if resume_ else "cancel" if cancel else "snapshot"
    cfg = load_merger_config(config, local, state_dir)
    if cfg.source_connector == "debezium" and not cfg.signal_table:
        # Debezium snapshots the table; the merger asks for it through the signal table
        raise ConfigError(
            "source_connector is debezium: set signal_table (Debezium's signal.data.collection) "
            "so that the merger can ask Debezium for snapshots"
        )
    from merger.state.store import StateStore

    if shard is not None and (action != "snapshot" or shard not in {s.name for s in cfg.shards}):
        names = ", ".join(s.name for s in cfg.shards) or "none"
        raise ConfigError(f"--shard {shard}: only with a snapshot, of a shard of the config (shards: {names})")
    args = {"where": where} if shard is None else {"where": where, "shard": shard}
    StateStore(cfg.state_dir).request(action, _check_table(table), **args)
    how = " (through Debezium's signal table)" if cfg.source_connector == "debezium" else ""
    console.print(f"requested: {action} {table}{how}")


@app.command()
def resume(
    table: str = typer.Argument(..., help="<database>.<table>"),
    config: Optional[Path] = CONFIG_OPTION,
    local: bool = typer.Option(False, "--local"),
    state_dir: Path = STATE_DIR_OPTION,
):
    """Resume a paused table (after an operator fixed what paused it)."""
    store = _store(config, local, state_dir)
    store.request("resume", _check_table(table))
    console.print(f"requested: resume {table}")


def verified_cell(last: dict | None, now: float) -> str:
    """A table's last background verify pass: its verdict and how long ago it ended."""
    if not last:
        return "-"
    ago = max(0.0, now - last.get("at", now))
    when = f"{ago:.0f}s ago" if ago < 120 else f"{ago / 60:.0f}m ago" if ago < 7200 else f"{ago / 3600:.0f}h ago"
    what = last.get("verdict", "?")
    if what == "different":
        found = [f"{last.get('differing_keys', 0)} keys"]
        if last.get("history_faults"):  # an SCD type 2 table's shape (merger.verify.history_shape)
            found = found[: 1 if last.get("differing_keys") else 0] + [f"{last['history_faults']} history faults"]
        what += f" ({', '.join(found)})"
    return f"{what} {when}"


def shard_line(shard: str, s: dict) -> str:
    """One shard's part of a table's status line: its snapshot chunks and its lag."""
    lag = "-" if s.get("lag_ms") is None else f"{s['lag_ms']:.0f} ms"
    return f"{shard}: {s.get('chunks_done', 0)}/{s.get('chunks_total', 0)} chunks, lag {lag}"


@app.command()
def status(
    config: Optional[Path] = CONFIG_OPTION,
    local: bool = typer.Option(False, "--local"),
    state_dir: Path = STATE_DIR_OPTION,
    as_json: bool = typer.Option(False, "--json"),
):
    """Per table: phase, snapshot chunks done of total, rows, lag, last applied offsets."""
    import json as _json

    store = _store(config, local, state_dir)
    st = store.read_status()
    if st is None:
        raise ConfigError(f"no merger status in {store.root}: has `cdc merge` run with this state_dir?")
    age = time.time() - st.get("updated_at", 0)
    st["merger"] = merger_state(store.running_merger(), store.read_exit(), age)
    if as_json:
        print(_json.dumps(st, indent=2))
        raise typer.Exit(0 if st["merger"]["running"] else 3)
    table = Table(
        title=f"merger (status {age:.0f}s old, last batch {st.get('last_batch')}, "
        f"bad records {st.get('bad_records', 0)})"
    )
    columns = ["table", "phase", "chunks", "snapshot rows", "rows applied", "lag ms", "offsets"]
    verified = any(t.get("verified") for t in st.get("tables", {}).values())
    for col in [*columns, *(["verified"] if verified else []), "note"]:
        table.add_column(col)
    for name, t in st.get("tables", {}).items():
        phase = t["phase"] + (" (blocked on sink)" if t.get("blocked_on_sink") else "")
        note = t.get("error") or t.get("blocked_on_sink") or ""
        if not note and t.get("nul_values_changed"):
            note = f"{t['nul_values_changed']} value(s) changed by nul_policy (docs/values.md)"
        if not note and t.get("shards"):
            note = "; ".join(shard_line(shard, s) for shard, s in t["shards"].items())
        offsets = ",".join(f"{p}:{o}" for p, o in sorted(t.get("last_offsets", {}).items()))
        lag = "-" if t.get("lag_ms") is None else f"{t['lag_ms']:.0f}"
        chunks = f"{t['chunks_done']}/{t['chunks_total']}"
        if t.get("snapshot") in ("paused", "cancelled"):
            chunks += f" ({t['snapshot']})"
        note = note if t.get("shards") and not t.get("error") else note[:80]
        cells = [name, phase, chunks, str(t["snapshot_rows"]), str(t["rows_applied"]), lag, offsets]
        if verified:
            cells.append(verified_cell(t.get("verified"), time.time()))
        table.add_row(*cells, note)
    out = Console(width=None if sys.stdout.isatty() else 200)  # piped: no wrapping at 80 columns
    out.print(table)
    merger_line = st["merger"]["summary"]
    out.print(merger_line if st["merger"]["running"] else f"[bold red]{merger_line}[/bold red]", highlight=False)
    down = st.get("source_unavailable")
    if not st["merger"]["running"]:
        raise typer.Exit(3)
    if down:
        Console().print(
            f"[yellow]waiting for the source[/yellow] ({down.get('what')}) since "
            f"{time.time() - down.get('since', time.time()):.0f}s, retry {down.get('retries')}: "
            f"{down.get('error')}",
            highlight=False,
        )


@app.command()
def verify(
    tables: Optional[list[str]] = typer.Argument(
        None, help="<database>.<table> ... (default: every table the merger handles)"
    ),
    config: Optional[Path] = CONFIG_OPTION,
    local: bool = typer.Option(False, "--local"),
    state_dir: Path = STATE_DIR_OPTION,
    sink: Optional[str] = typer.Option(
        None,
        "--sink",
        help="verify only this sink: its section under sinks: in the config (another name lists those verify reads)",
    ),
    chunk_size: Optional[int] = typer.Option(
        None, "--chunk-size", min=1, help="rows per chunk (default: snapshot.chunk_size)"
    ),
    retries: int = typer.Option(3, "--retries", min=0, help="re-checks of a differing chunk"),
    retry_wait: str = typer.Option("2s", "--retry-wait", help="wait before a re-check (2s, 500ms)"),
    limit: int = typer.Option(20, "--limit", min=1, help="differing keys listed per table and sink"),
    compare: str = typer.Option(
        "digest",
        "--compare",
        help="digest: each side hashes a chunk in SQL and only differing chunks are read row by row; "
        "rows: read and compare every row",
    ),
    as_json: bool = typer.Option(False, "--json"),
    consistent: Optional[bool] = typer.Option(
        None,
        "--consistent/--no-consistent",
        help="confirm each difference at a known position through the running merger's verify windows "
        "(default: when a merger runs on the state_dir); --no-consistent: re-read after --retry-wait",
        show_default=False,
    ),
    repair_: bool = typer.Option(
        False, "--repair", help="repair what differs through the running merger, then verify again (`cdc repair`)"
    ),
    repair_timeout: str = typer.Option("10m", "--repair-timeout", help="how long to wait for each table's repair"),
):
    """Compare each sink table with its source in key-range chunks, without locking the
    source. Exit code 0: all equal; 1: a difference; 2: a table could not be verified;
    3: a sink was skipped (nothing compared for it)."""
    from cdc.cli.verify import VerifyOptions, parse_compare, parse_duration, run_verify

    wait = parse_duration(retry_wait)
    digests = parse_compare(compare)
    named = [_check_table(t) for t in tables or []]
    cfg = load_merger_config(config, local, state_dir)
    opts = VerifyOptions(sink, chunk_size, retries, wait, limit, digests, consistent)
    if repair_:
        from cdc.cli.repair import run_repair

        exit_now(run_repair(cfg, named, opts, as_json, console, parse_duration(repair_timeout, "--repair-timeout")))
    exit_now(run_verify(cfg, named, opts, as_json, console))


@app.command()
def repair(
    tables: Optional[list[str]] = typer.Argument(
        None, help="<database>.<table> ... (default: every table the merger handles)"
    ),
    config: Optional[Path] = CONFIG_OPTION,
    local: bool = typer.Option(False, "--local"),
    state_dir: Path = STATE_DIR_OPTION,
    sink: Optional[str] = typer.Option(
        None,
        "--sink",
        help="find the differences in this sink only: its section under sinks: (another name lists those repair reads)",
    ),
    chunk_size: Optional[int] = typer.Option(
        None, "--chunk-size", min=1, help="rows per verify chunk (default: snapshot.chunk_size)"
    ),
    timeout: str = typer.Option("10m", "--timeout", help="how long to wait for each table's repair"),
    limit: int = typer.Option(20, "--limit", min=1, help="differing keys listed per table and sink after the repair"),
    where: Optional[str] = typer.Option(
        None,
        "--where",
        help="one table: re-read every row the source or a sink holds that meets this SQL condition (run on "
        "each side in its own SQL), instead of the rows verify finds different",
    ),
    as_json: bool = typer.Option(False, "--json"),
):
    """Find the rows that differ (cdc verify) and have the running merger re-read them from
    the source between watermarks, deleting those only a sink holds; then verify again.
    Never locks or writes the source (but its watermark table). Exit codes as cdc verify's,
    for the verify after the repair."""
    from cdc.cli.repair import run_repair
    from cdc.cli.verify import VerifyOptions, parse_duration

    wait = parse_duration(timeout, "--timeout")
    named = [_check_table(t) for t in tables or []]
    cfg = load_merger_config(config, local, state_dir)
    opts = VerifyOptions(sink=sink, chunk_size=chunk_size, limit=limit)
    if where is not None:
        from cdc.cli.repair import run_where_repair

        if len(named) != 1:
            raise ConfigError("--where: name exactly one table")
        exit_now(run_where_repair(cfg, named[0], where, opts, wait, as_json, console))
    exit_now(run_repair(cfg, named, opts, as_json, console, wait))


shard_app = typer.Typer(no_args_is_help=True, help="Operator steps of a sharded source (docs/sharding.md).")
app.add_typer(shard_app, name="shard")


@shard_app.command("remove")
def shard_remove(
    name: str = typer.Argument(..., help="the shard, already taken out of the ingest and merger configs"),
    delete_rows: bool = typer.Option(False, "--delete-rows", help="delete the shard's rows from every sink"),
    keep_rows: bool = typer.Option(False, "--keep-rows", help="keep them: only count what stays"),
    config: Optional[Path] = CONFIG_OPTION,
    local: bool = typer.Option(False, "--local"),
    state_dir: Path = STATE_DIR_OPTION,
):
    """After removing a shard from both configs, with the merger stopped: delete its rows
    (those whose __cdc_origin starts with NAME/) from the sinks, or keep them and list them."""
    from cdc.cli.shard import remove_shard
    from merger.sinks.registry import build_sinks
    from merger.state.store import StateStore

    if delete_rows == keep_rows:
        raise ConfigError("say what happens to the shard's rows: --delete-rows or --keep-rows")
    cfg = load_merger_config(config, local, state_dir)
    remove_shard(cfg, StateStore(cfg.state_dir), name, delete_rows, build_sinks, _say_out())


move_app = typer.Typer(
    no_args_is_help=True,
    help="Move a key range of a logical table between shards, key_mode unique (docs/operations/shards.md).",
)
shard_app.add_typer(move_app, name="move")


def _say_out():
    """A printer of plain lines to stdout (what a command reports, for scripts too)."""
    out = Console(width=None if sys.stdout.isatty() else 200)
    return lambda line: out.print(line, highlight=False)


@move_app.command("begin")
def shard_move_begin(
    table: str = typer.Option(..., "--table", help="the logical table, db.table"),
    source: str = typer.Option(..., "--from", help="the shard that holds the range now"),
    target: str = typer.Option(..., "--to", help="the shard the range moves to"),
    low: Optional[str] = typer.Option(None, "--low", help='the range\'s first key (JSON: 1000, "eu"); none: unbounded'),
    high: Optional[str] = typer.Option(None, "--high", help="the key after the range (JSON); none: unbounded"),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="the merger's YAML file: its shard users write the watermark tables"
    ),
    local: bool = typer.Option(False, "--local"),
    state_dir: Path = STATE_DIR_OPTION,
):
    """Begin a move: write its begin row on the target shard, before its copy of the range.
    The range: keys whose first key column is >= LOW and < HIGH."""
    from cdc.cli import shard_move

    ks = shard_move.Keyspace(load_merger_config(config, local, state_dir))
    try:
        shard_move.begin(ks, table, shard_move.bound(low), shard_move.bound(high), source, target, _say_out())
    finally:
        ks.close()


@move_app.command("switch")
def shard_move_switch(
    number: int = typer.Argument(..., help="the move, as `begin` numbered it"),
    check: bool = typer.Option(True, "--check/--no-check", help="refuse unless the range's rows are equal on both"),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="the merger's YAML file: its shard users write the watermark tables"
    ),
    local: bool = typer.Option(False, "--local"),
    state_dir: Path = STATE_DIR_OPTION,
):
    """Switch a move, with the writes to its range stopped: its switch rows on the source,
    then on the target. Then send the range's writes to the target and delete it from the
    source."""
    from cdc.cli import shard_move

    ks = shard_move.Keyspace(load_merger_config(config, local, state_dir))
    try:
        shard_move.switch(ks, number, check, _say_out())
    finally:
        ks.close()


@app.command("spark-archive")
def spark_archive(force: bool = typer.Option(False, "--force", help="build it again even if it exists")):
    """Build the JVM class-data archive that starts the merger's Spark ~2 s faster (local
    mode). The README's install builds it; run this after changing Java or Spark."""
    from merger.spark import archive as archive

    _setup_logging(False)
    path = archive.archive_path()
    if path is not None and path.is_file() and not force:
        console.print(f"exists: {path}")
        return
    if path is not None:
        console.print("building the Spark class-data archive (a short Spark run, ~30 s)...")
    console.print(f"written: {archive.build(force=force)}")


# ------------------------------------------------------------------ entry point


def _click_exceptions() -> tuple[type, ...]:
    """Click's usage-error class: recent typer raises its own copy of click's; click itself
    may be installed too (another package needs it), whose class is another one."""
    found = []
    try:
        from typer._click.exceptions import ClickException as bundled

        found.append(bundled)
    except ImportError:
        pass
    try:
        from click import ClickException

        found.append(ClickException)
    except ImportError:
        pass
    return tuple(found)


as_prose(app)  # after every command is defined


def main() -> None:
    from cdc.errors import USER_ERRORS

    try:
        code = app(standalone_mode=False)  # click returns a command's typer.Exit code here
        if isinstance(code, int) and code:
            sys.exit(code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except USER_ERRORS as exc:
        from rich.markup import escape

        # one line, never wrapped; brackets in the message are text, not markup
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click's usage errors
        if isinstance(exc, _click_exceptions()):
            exc.show()
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
