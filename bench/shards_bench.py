"""Sharded ingest throughput (issue 24): 1, 2 and 4 shards in one process and one process
per shard, in the same run, against one shard alone.

Each shard server of the bench's own stack (kafka + 4 shard servers, no replicas, under
--state-dir) gets its binlog reset, then a backlog of --rows rows in one table
``bench_sh.orders`` (CREATE first, then one multi-row INSERT per transaction of 1,000 rows).
The backlog is written once, before any ingest runs; every case reads it again from the
start of each shard's binlog (``start.mode: file``, ``binlog.000001``:4, a fresh
topic_prefix each), as ``cdc ingest`` processes:

* ``1 shard, 1 process``: a sharded config listing shard1 only (the baseline);
* ``2 / 4 shards, 1 process``: one config listing the shards, one ``cdc ingest`` process;
* ``2 / 4 shards, per shard``: the same config, one ``cdc ingest --shard NAME`` per shard;
* ``2 / 4 shards, key mode unique``: one process, ``key_mode: unique`` (every record
  stamped with the emission counter; no moves, so the filter passes everything);
* ``plain config (reference)``: shard1 as a one-server source (no ``shards``), the code
  path of bench/ingest_throughput.py.

Why ``start.mode: file`` and not ``gtid``: there is one ``start.gtid`` for the whole
config, and a GTID state listing every shard's domain ("1-100-7,2-200-7") is refused by
each shard's reader (its source check finds the other domains missing from the shard's
binlog: "the source's GTID position 1-100-7 is behind ingest's 1-100-7,2-200-7 ...").
The binlog file name and offset apply to every shard alike once each binlog is reset.

The clock runs from the start of the ingest process(es) to the moment every shard's entry
on ``<prefix>.offsets`` covers that shard's backlog (its last GTID, no transaction cut
open). The offsets topic is polled read_uncommitted: on the local broker (Tansu),
read_committed readers get nothing while several producers' transactions overlap
(docs/sharding.md), which the per-shard cases are. A position record is written just
before its transaction's commit, so the two differ by one commit; after each case the last
vector is checked again read_committed (once the processes stopped). That broker
behaviour holds back consumers, not the writes this bench measures.

A case whose processes make no progress (no new position) for --stall-s seconds, or whose
process exits, fails with what it reached; the run goes on with the next case. Peak RSS
(VmHWM) and CPU seconds (user + system, imports included) of the ingest process(es) are
read from /proc just before they are stopped.

    .venv/bin/python -m bench.shards_bench [--rows 100000] [--repeat 1] [--record] [--down]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql
import yaml
from confluent_kafka import Consumer, KafkaException, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import append_results, commit_label  # noqa: E402
from cdc import stack as local_stack  # noqa: E402
from cdc import stack_shards  # noqa: E402
from cdc.wire.topics import offsets_topic  # noqa: E402

DB = "bench_sh"
TABLE = f"{DB}.orders"
DDL = f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, a INT, b VARCHAR(40), c DECIMAL(10,2))"
TRX_ROWS = 1000
MAX_SHARDS = 4
CASES = (  # label, shards, mode ("one": one process; "each": one process per shard; "plain";
    # "unique": one process in key mode unique, every record stamped with the emission counter)
    ("1 shard, 1 process (baseline)", 1, "one"),
    ("2 shards, 1 process", 2, "one"),
    ("4 shards, 1 process", 4, "one"),
    ("2 shards, 1 process, key mode unique", 2, "unique"),
    ("4 shards, 1 process, key mode unique", 4, "unique"),
    ("2 shards, 1 process per shard", 2, "each"),
    ("4 shards, 1 process per shard", 4, "each"),
    ("1 server, plain config (reference)", 1, "plain"),
)
NOTE = (
    "On the local broker (Tansu), several producers' overlapping transactions hold back "
    "read_committed consumers (docs/sharding.md): that concerns the per-shard cases' readers, "
    "not what this bench measures (the writes: events committed with their positions)."
)


class CaseFailed(RuntimeError):
    pass


# ------------------------------------------------------------------------------- stack


def stack_up(state_dir: Path) -> tuple[local_stack.StackInfo, dict[str, local_stack.StackInfo]]:
    """kafka of the bench's own stack and shard1..4 (no replicas), started if not running."""
    cdc = str(Path(sys.executable).with_name("cdc"))
    up = subprocess.run(
        [cdc, "stack", "up", "--state-dir", str(state_dir), "--only", "kafka"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if up.returncode:
        raise SystemExit(f"bench: cdc stack up failed:\n{up.stdout[-2000:]}{up.stderr[-2000:]}")
    stack_shards.up(state_dir, MAX_SHARDS, replicas=False)
    shards = {
        s.name: local_stack.StackInfo.load(Path(s.primary))
        for s in stack_shards.load(state_dir)
        if int(s.name.removeprefix("shard")) <= MAX_SHARDS
    }
    return local_stack.StackInfo.load(state_dir), shards


def stack_down(state_dir: Path) -> None:
    stack_shards.down(state_dir)
    cdc = str(Path(sys.executable).with_name("cdc"))
    subprocess.run([cdc, "stack", "down", "--state-dir", str(state_dir)], timeout=120)


def _root(info: local_stack.StackInfo):
    m = info.mariadb
    return pymysql.connect(
        host=m.host, port=m.port, user="root", password=m.root_password, autocommit=True, connect_timeout=10
    )


def write_backlog(info: local_stack.StackInfo, rows: int, out: dict, name: str) -> None:
    """Resets the shard's binlog (the bench's own server), then CREATE and the backlog."""
    try:
        conn = _root(info)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")
            cur.execute("RESET MASTER")
            cur.execute("SHOW MASTER STATUS")
            file = cur.fetchone()[0]
            cur.execute(f"CREATE DATABASE {DB}")
            cur.execute(DDL)
            t0 = time.monotonic()
            for trx in range(rows // TRX_ROWS):
                base = trx * TRX_ROWS
                cur.execute("BEGIN")
                cur.execute(
                    f"INSERT INTO {TABLE} VALUES "
                    + ",".join(f"({base + i},{i},'some text value {i}',12.34)" for i in range(TRX_ROWS))
                )
                cur.execute("COMMIT")
            took = time.monotonic() - t0
            cur.execute("SELECT @@gtid_binlog_pos")
            end = cur.fetchone()[0]
        conn.close()
        out[name] = {"file": file, "gtid_end": end, "write_s": took}
    except Exception as exc:  # noqa: BLE001 - reported by the caller
        out[name] = {"error": f"{type(exc).__name__}: {exc}"}


def write_backlogs(shards: dict, rows: int) -> dict:
    out: dict = {}
    threads = [threading.Thread(target=write_backlog, args=(info, rows, out, n)) for n, info in shards.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(1800)
    bad = {n: b.get("error", "did not finish") for n, b in ((n, out.get(n, {})) for n in shards) if "gtid_end" not in b}
    if bad:
        raise SystemExit(f"bench: writing the backlog failed: {bad}")
    return out


# ------------------------------------------------------------------------------- ingest


def _mysql(info: local_stack.StackInfo) -> dict:
    return {
        "host": info.mariadb.host,
        "port": info.mariadb.port,
        "user": info.mariadb.user,
        "password_file": str(local_stack.secret_file(info, "mysql_password")),
    }


def write_config(
    path: Path, kafka: local_stack.StackInfo, shards: dict, names: list[str], prefix: str, plain: bool, unique: bool
):
    cfg = {
        "topic_prefix": prefix,
        "server_id": 7300 + (int(time.time()) % 1000),
        "kafka": {"bootstrap_servers": kafka.kafka.bootstrap},
        "database_include": [DB],
        "heartbeat_interval_ms": 0,
        "start": {"mode": "file", "file": "binlog.000001", "pos": 4},
    }
    if plain:
        cfg["mysql"] = _mysql(shards[names[0]])
    else:
        cfg["shards"] = [{"name": n, "mysql": _mysql(shards[n])} for n in names]
    if unique:
        cfg["key_mode"] = "unique"
    path.write_text(yaml.safe_dump(cfg))
    return path


class OffsetsWatch:
    """Every shard's latest entry on ``<prefix>.offsets`` (read_uncommitted, or committed)."""

    def __init__(self, bootstrap: str, prefix: str, committed: bool = False):
        self.topic = offsets_topic(prefix)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"shards-bench-{prefix}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed" if committed else "read_uncommitted",
            }
        )
        self.assigned = False
        self.entries: dict[str, dict] = {}
        self.records = 0

    def poll(self, timeout: float = 0.1) -> None:
        if not self.assigned:
            topics = self.consumer.list_topics(self.topic, timeout=5).topics
            meta = topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                time.sleep(timeout)
                return
            self.consumer.assign([TopicPartition(self.topic, 0, 0)])
            self.assigned = True
        while True:
            msg = self.consumer.poll(timeout)
            if msg is None:
                return
            timeout = 0
            if msg.error() or not msg.value():
                continue
            try:
                value = json.loads(msg.value())
            except ValueError:
                continue
            if isinstance(value, dict) and isinstance(value.get("shards"), dict):
                self.entries.update(value["shards"])
                self.records += 1
            elif isinstance(value, dict) and "gtid_state" in value:  # a one-server record (plain)
                self.entries["shard1"] = value
                self.records += 1

    def close(self) -> None:
        self.consumer.close()


def _seq(state: str | None, domain: int) -> int:
    for g in (state or "").split(","):
        if g.strip() and int(g.split("-")[0]) == domain:
            return int(g.split("-")[2])
    return 0


def covered(entries: dict, targets: dict[str, str]) -> list[str]:
    """The shards whose entry covers their backlog."""
    out = []
    for name, target in targets.items():
        e = entries.get(name)
        domain, _, seq = (int(x) for x in target.split("-"))
        if e is not None and e.get("trx_gtid") is None and _seq(e.get("gtid_state"), domain) >= seq:
            out.append(name)
    return out


def _proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds user + system, peak RSS MB) of a running process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    hwm = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return cpu, hwm


def run_case(label, count, mode, kafka, shards, backlogs, rows, work: Path, stall_s, case_timeout_s) -> dict:
    names = [f"shard{i}" for i in range(1, count + 1)]
    prefix = f"shb{int(time.time() * 1000) % 10**9}"
    config = write_config(
        work / f"{prefix}.yaml", kafka, shards, names, prefix, plain=(mode == "plain"), unique=(mode == "unique")
    )
    targets = {n: backlogs[n]["gtid_end"] for n in names}
    cdc_cmd = [sys.executable, "-m", "cdc.cli", "ingest", "-c", str(config)]
    commands = [[*cdc_cmd, "--shard", n] for n in names] if mode == "each" else [cdc_cmd]
    result = {"case": label, "shards": count, "processes": len(commands), "events": rows * count, "prefix": prefix}
    watch = OffsetsWatch(kafka.kafka.bootstrap, prefix)
    procs, logs = [], []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    try:
        for i, cmd in enumerate(commands):
            log = open(work / f"{prefix}-{i}.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT))
        progress, last_move, first = None, time.monotonic(), None
        while True:
            watch.poll(0.1)
            now = time.monotonic()
            if first is None and watch.records:
                first = now
            done = covered(watch.entries, targets)
            if len(done) == len(targets):
                result["seconds"] = now - t0
                result["seconds_from_first_commit"] = now - first
                break
            state = json.dumps(watch.entries, sort_keys=True)
            if state != progress:
                progress, last_move = state, now
            reached = {n: (watch.entries.get(n) or {}).get("gtid_state") for n in names}
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                raise CaseFailed(
                    f"an ingest process exited (rc {dead[0].returncode}); reached {reached} of {targets}; "
                    f"log: {logs[procs.index(dead[0])].name}"
                )
            if now - last_move > stall_s:
                raise CaseFailed(f"no progress for {stall_s:.0f}s; reached {reached} of {targets}")
            if now - t0 > case_timeout_s:
                raise CaseFailed(f"not done in {case_timeout_s:.0f}s; reached {reached} of {targets}")
        stats = [_proc_stats(p.pid) for p in procs]
        result["cpu_s"] = sum(s[0] for s in stats)
        result["peak_rss_mb"] = max(s[1] for s in stats)
        result["rss_sum_mb"] = sum(s[1] for s in stats)
        result["events_per_s"] = result["events"] / result["seconds"]
        result["position_records"] = watch.records
    finally:
        watch.close()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(45)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for log in logs:
            log.close()
    result["committed_check"] = check_committed(kafka.kafka.bootstrap, prefix, targets)
    return result


def check_committed(bootstrap: str, prefix: str, targets: dict, timeout_s: float = 30.0) -> str:
    """After the processes stopped: does a read_committed reader see every shard covered?"""
    watch = OffsetsWatch(bootstrap, prefix, committed=True)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            watch.poll(0.2)
            if len(covered(watch.entries, targets)) == len(targets):
                return "yes"
        return f"NO: read_committed saw {covered(watch.entries, targets)} of {sorted(targets)} in {timeout_s:.0f}s"
    except KafkaException as exc:
        return f"NO: {exc}"
    finally:
        watch.close()


# ------------------------------------------------------------------------------- driver


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000, help="backlog rows per shard (transactions of 1,000)")
    ap.add_argument("--state-dir", default="/tmp/shards-bench")
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    ap.add_argument("--down", action="store_true", help="stop the bench's stack at the end")
    ap.add_argument("--stall-s", type=float, default=60.0, help="fail a case that makes no progress this long")
    ap.add_argument("--case-timeout-s", type=float, default=1200.0)
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every case in turn (the median is shown)")
    ap.add_argument("--skip-plain", action="store_true", help="leave out the plain one-server reference case")
    args = ap.parse_args()
    if args.rows < TRX_ROWS or args.rows % TRX_ROWS:
        raise SystemExit(f"--rows: a multiple of {TRX_ROWS}")

    state_dir = Path(args.state_dir).resolve()
    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M")
    try:
        kafka, shards = stack_up(state_dir)
        work = state_dir / "bench-work"
        work.mkdir(exist_ok=True)
        print(f"writing {args.rows:,} rows on each of {len(shards)} shards ...", flush=True)
        backlogs = write_backlogs(shards, args.rows)
        for n, b in sorted(backlogs.items()):
            print(f"  {n}: {b['gtid_end']} ({b['write_s']:.1f} s)", flush=True)
        results = []
        for round_ in range(1, args.repeat + 1):  # the cases in turn, round after round
            for label, count, mode in CASES:
                if mode == "plain" and args.skip_plain:
                    continue
                print(f"case: {label}" + (f" (round {round_})" if args.repeat > 1 else "") + " ...", flush=True)
                try:
                    r = run_case(
                        label, count, mode, kafka, shards, backlogs, args.rows, work, args.stall_s, args.case_timeout_s
                    )
                except CaseFailed as exc:
                    r = {"case": label, "processes": count if mode == "each" else 1, "failed": str(exc)}
                    print(f"  FAILED: {exc}", flush=True)
                else:
                    print(
                        f"  {r['events']:,} events in {r['seconds']:.2f} s: {r['events_per_s']:,.0f} events/s "
                        f"(committed check: {r['committed_check']})",
                        flush=True,
                    )
                results.append(r)
    finally:
        if args.down:
            stack_down(state_dir)
    lines = report(results, args, started, load_start)
    print("\n".join(lines))
    if args.record:
        append_results(lines)


def median_runs(results: list[dict]) -> list[dict]:
    """Per case (in order): the run of median seconds, with the events/s of every run; a
    case with a failed run gets a row of its failure too."""
    out = []
    for label in dict.fromkeys(r["case"] for r in results):
        runs = [r for r in results if r["case"] == label]
        good = sorted((r for r in runs if "failed" not in r), key=lambda r: r["seconds"])
        if good:
            row = dict(good[(len(good) - 1) // 2])
            row["all_events_per_s"] = sorted(r["events_per_s"] for r in good)
            out.append(row)
        out += [r for r in runs if "failed" in r]
    return out


def report(results: list[dict], args, started: str, load_start: tuple) -> list[str]:
    rows = median_runs(results)
    base = next((r for r in rows if r["case"].startswith("1 shard") and "failed" not in r), None)
    load_end = os.getloadavg()
    repeat = f" --repeat {args.repeat}" if args.repeat > 1 else ""
    lines = [
        f"### sharded ingest: shards and processes — {started}, commit {commit_label()}, "
        f"{os.cpu_count()} cores, load average {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f} "
        f"at start ({load_end[0]:.2f} at the end) (`bench/shards_bench.py --rows {args.rows}{repeat}`)",
        "",
        f"{args.rows:,} rows per shard in transactions of 1,000 (multi-row INSERTs), written before ingest "
        "starts; each case reads every shard's binlog from its start, fresh topic prefix; seconds from the "
        "start of the ingest process(es) to every shard's position record covering its backlog (imports and "
        "connecting included). All on one machine: 4 MariaDB servers, the broker and ingest share the cores."
        + (
            f" {args.repeat} rounds of every case in turn: the run of median seconds, and every run's events/s."
            if args.repeat > 1
            else ""
        ),
        "",
        "| case | processes | events | seconds | from first commit | events/s | ÷ 1 shard | CPU s | "
        "peak RSS MB (sum) | committed (read_committed) |" + (" events/s of every run |" if args.repeat > 1 else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if args.repeat > 1 else ""),
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['case']} | {r['processes']} | FAILED: {r['failed']} | | | | | | | |")
            continue
        ratio = f"{r['events_per_s'] / base['events_per_s']:.2f}x" if base else ""
        rss = f"{r['peak_rss_mb']:.0f}" + (f" ({r['rss_sum_mb']:.0f})" if r["processes"] > 1 else "")
        every = " " + ", ".join(f"{v:,.0f}" for v in r["all_events_per_s"]) + " |" if args.repeat > 1 else ""
        lines.append(
            f"| {r['case']} | {r['processes']} | {r['events']:,} | {r['seconds']:.2f} | "
            f"{r['seconds_from_first_commit']:.2f} | {r['events_per_s']:,.0f} | {ratio} | {r['cpu_s']:.1f} | "
            f"{rss} | {r['committed_check']} |{every}"
        )
    lines += ["", f"- {NOTE}"]
    return lines


if __name__ == "__main__":
    main()
