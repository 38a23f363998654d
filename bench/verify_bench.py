"""`cdc verify` throughput on an unchanged table, per sink, next to a plain `SELECT *` and
reladiff; then on the same table with scattered differences in PostgreSQL, next to reladiff.

A table of --rows rows (integer key; BIGINT, VARCHAR with accents and an emoji, DECIMAL,
DATETIME(6), DATE, a TEXT that is NULL in every tenth row) is created in MariaDB of the
local stack and written to PostgreSQL and Delta through the merger's own sink classes (so
the sinks hold the pipeline's column types). Then, in the same run:

* baseline: pymysql `SELECT *` of the whole table, fetched (what reading it costs a client);
* `cdc verify`'s comparison (merger.verify.chunked.TableVerifier, the code the command
  runs), each sink alone, `--compare digest` (the SQL digests) and `--compare rows`
  (every row read and compared in Python), and both sinks in one run;
* the peer baseline (with --reladiff PATH): reladiff (the maintained fork of data-diff:
  checksums with bisection), MariaDB against PostgreSQL, every column compared, ``-j 4``,
  run as its own process: the test extra installs it (``reladiff[mysql,postgresql]``);
  --reladiff names another executable.

Then --changes rows of the PostgreSQL copy are changed (``name``, one every 10,007 keys
from key 1) and `cdc verify --sink postgres` and reladiff each must find exactly those keys.

Every figure is wall time from the start of the verification (chunk planning included) to
its result, and rows/s = source rows / that time; reladiff's includes its process start.

    .venv/bin/python bench/verify_bench.py [--rows 1000000] [--repeat 3] [--reladiff /venv/bin/reladiff] [--record]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import append_results, commit_label  # noqa: E402

DB = "verify_bench"
TABLE = "orders"
TARGET = 1_000_000  # rows/s per sink (issue 12)
PEER_RATIO = 2.0  # cdc verify's rows/s at least twice reladiff's (issue 26)
EVERY = 10_007  # keys between two changed rows
COLUMNS = ("customer", "name", "amount", "created", "due", "note")


def make_table(info, rows: int, work: Path) -> float:
    """The source table and both sink copies; returns the seconds it took."""
    import pyarrow as pa
    import pymysql

    from cdc import stack as local_stack
    from cdc.config import MySQLConfig
    from merger.schema.canonical import arrow_schema, snapshot_select
    from merger.schema.catalog import SourceCatalog
    from merger.sinks.delta import DeltaSink
    from merger.sinks.postgres import PostgresSink
    from merger.snapshot.direct_read import canonical_source_rows

    t0 = time.time()
    m = info.mariadb
    conn = pymysql.connect(host=m.host, port=m.port, user="root", password=m.root_password, charset="utf8mb4")
    conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB} CHARACTER SET utf8mb4")
        cur.execute(
            f"CREATE TABLE {DB}.{TABLE} (id INT PRIMARY KEY, customer BIGINT NOT NULL, name VARCHAR(60), "
            "amount DECIMAL(12,2), created DATETIME(6), due DATE, note TEXT)"
        )
        cur.execute(
            f"INSERT INTO {DB}.{TABLE} SELECT seq, seq * 7919 % 100003, CONCAT('customer ', seq, ' é😀'), "
            "seq / 100, TIMESTAMP('2020-01-01') + INTERVAL seq SECOND + INTERVAL (seq % 1000) MICROSECOND, "
            "DATE('2000-01-01') + INTERVAL (seq % 9000) DAY, IF(seq % 10 = 0, NULL, REPEAT('x', seq % 50)) "
            f"FROM {DB}.seq_1_to_{int(rows)}"
        )
    catalog = SourceCatalog(
        MySQLConfig(
            host=m.host,
            port=m.port,
            user="root",
            password_file=str(local_stack.secret_file(info, "mysql_root_password")),
        )
    )
    spec = catalog.table_spec(DB, TABLE)
    schema = arrow_schema(spec)
    sinks = [DeltaSink(work / "delta"), PostgresSink(info.postgres)]
    import psycopg

    p = info.postgres
    with psycopg.connect(
        host=p.host, port=p.port, user=p.user, password=p.password, dbname=p.database, autocommit=True
    ) as pg:
        pg.execute(f"DROP SCHEMA IF EXISTS {DB} CASCADE")  # the sink's schema is the database's name
    for sink in sinks:
        sink.ensure_table((DB, TABLE), schema, ["id"])
    step = 200_000
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for lo in range(1, rows + 1, step):
            cur.execute(
                f"SELECT {snapshot_select(spec)} FROM {DB}.{TABLE} WHERE id >= %s AND id < %s ORDER BY id",
                (lo, lo + step),
            )
            names = [d[0] for d in cur.description]
            part = canonical_source_rows(spec, names, cur.fetchall())
            n = part.num_rows
            part = part.append_column("_cdc_op", pa.array(["r"] * n, pa.string()))
            part = part.append_column("_cdc_seq", pa.array([1] * n, pa.int64()))
            for sink in sinks:
                sink.apply((DB, TABLE), 1 + lo // step, part)
    sinks[1].close()
    conn.close()
    return time.time() - t0


def select_all(info) -> float:
    import pymysql

    m = info.mariadb
    conn = pymysql.connect(host=m.host, port=m.port, user="root", password=m.root_password, charset="utf8mb4")
    t0 = time.time()
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {DB}.{TABLE}")
        n = len(cur.fetchall())
    took = time.time() - t0
    conn.close()
    assert n > 0
    return took


def change_sink(info, count: int) -> list[int]:
    """Change ``name`` of ``count`` rows of the PostgreSQL copy, one every EVERY keys."""
    import psycopg

    keys = [1 + EVERY * j for j in range(count)]
    p = info.postgres
    with psycopg.connect(
        host=p.host, port=p.port, user=p.user, password=p.password, dbname=p.database, autocommit=True
    ) as pg:
        cur = pg.execute(f"UPDATE {DB}.{TABLE} SET name = name || '!' WHERE id = ANY(%s)", (keys,))
        if cur.rowcount != count:
            raise SystemExit(f"changed {cur.rowcount} rows of the PostgreSQL copy, not {count}")
    return keys


def run_reladiff(info, exe: str) -> tuple[float, set[int]]:
    """reladiff MariaDB -> PostgreSQL over every column, 4 threads per database: (seconds,
    the keys it reports)."""
    import json
    import subprocess
    from urllib.parse import quote

    m, p = info.mariadb, info.postgres
    mysql = f"mysql://root:{quote(m.root_password, safe='')}@{m.host}:{m.port}/{DB}?collation=utf8mb4_general_ci"
    pg = f"postgresql://{quote(p.user, safe='')}:{quote(p.password, safe='')}@{p.host}:{p.port}/{p.database}"
    cols = [a for c in COLUMNS for a in ("-c", c)]
    cmd = [exe, mysql, TABLE, pg, f"{DB}.{TABLE}", "-k", "id", *cols, "-j", "4", "--json"]
    t0 = time.time()
    env = {**os.environ, "COLUMNS": "100000"}  # its console wraps long JSON lines otherwise
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    took = time.time() - t0
    if done.returncode != 0:
        raise SystemExit(f"reladiff failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    keys = set()
    for line in done.stdout.splitlines():
        if line.strip():  # ["-" or "+", [key, columns...]]: a changed row is two lines
            keys.add(int(json.loads(line)[1][0]))
    return took, keys


def run_verify(
    info, work: Path, sinks: list[str], digests: bool, chunk_size: int, limit: int = 1000
) -> tuple[float, list]:
    import pymysql

    from merger.verify.chunked import TableVerifier
    from merger.verify.sinks.delta import DeltaReader
    from merger.verify.sinks.postgres import PostgresReader
    from merger.verify.source import SourceReader

    m, p = info.mariadb, info.postgres
    source = SourceReader(lambda: pymysql.connect(host=m.host, port=m.port, user="root", password=m.root_password))
    make = {
        "delta": lambda: DeltaReader(str(work / "delta")),
        "postgres": lambda: PostgresReader(
            {"host": p.host, "port": p.port, "user": p.user, "password": p.password, "dbname": p.database}
        ),
    }
    readers = {n: make[n]() for n in sinks}
    try:
        t0 = time.time()
        table = source.describe(DB, TABLE)
        results = TableVerifier(
            source, table, ["id"], readers, chunk_size, retries=0, digests=digests, limit=limit
        ).run()
        took = time.time() - t0
    finally:
        source.close()
        for r in readers.values():
            r.close()
    return took, results


def _equal(results) -> None:
    for r in results:
        if r.verdict != "equal":
            raise SystemExit(f"verify found the copy {r.verdict}: {r.to_json()}")


def found_keys(result) -> set[int]:
    keys = {k[0] for k in (*result.missing, *result.extra)} | {k[0] for k, _ in result.different}
    if result.unlisted:
        raise SystemExit(f"verify left {result.unlisted} keys unlisted: raise its limit")
    return {int(k) for k in keys}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunk-size", type=int, default=50_000, help="verify's chunk size (the command's default)")
    ap.add_argument("--changes", type=int, default=100, help="rows changed in PostgreSQL for the second part (0: none)")
    beside = Path(sys.executable).with_name("reladiff")
    ap.add_argument(
        "--reladiff",
        default=str(beside) if beside.exists() else None,
        help="the reladiff executable (the peer baseline); default: the one beside this Python, if any, else not run",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs of each comparison with a baseline (medians)")
    ap.add_argument("--skip-rows", action="store_true", help="do not time --compare rows (slow)")
    ap.add_argument("--state-dir", default=str(ROOT / ".cdc" / "bench-stack"))
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the figures to bench/HISTORY.md (then update the table of bench/RESULTS.md)",
    )
    args = ap.parse_args(argv)
    if args.changes and (args.changes - 1) * EVERY + 1 > args.rows:
        ap.error(f"--changes {args.changes} needs at least {(args.changes - 1) * EVERY + 1} rows (one every {EVERY})")

    from cdc import stack as local_stack

    load = os.getloadavg()
    info = local_stack.up(Path(args.state_dir))
    work = Path(args.state_dir) / "verify-bench"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"making {args.rows:,} rows in MariaDB, PostgreSQL and Delta ...", flush=True)
    made = make_table(info, args.rows, work)
    print(f"  {made:.1f} s", flush=True)
    import statistics

    # the comparisons with the baselines alternate, --repeat times: medians (a shared machine)
    times: dict[str, list[float]] = {"select": [], "verify": [], "reladiff": []}
    pg_result = None
    for _ in range(args.repeat):
        times["select"].append(select_all(info))
        took, results = run_verify(info, work, ["postgres"], True, args.chunk_size)
        _equal(results)
        times["verify"].append(took)
        pg_result = results[0]
        if args.reladiff:
            took, keys = run_reladiff(info, args.reladiff)
            if keys:
                raise SystemExit(f"reladiff found {len(keys)} differences in the unchanged copy: {sorted(keys)[:10]}")
            times["reladiff"].append(took)
        print("  " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items() if v), flush=True)
    base = statistics.median(times["select"])
    peer = statistics.median(times["reladiff"]) if times["reladiff"] else None
    runs = [
        (
            ["postgres"],
            True,
            statistics.median(times["verify"]),
            {"postgres": pg_result.digest_chunks},
            pg_result.chunks,
        )
    ]
    for sinks in (["postgres"], ["delta"], ["postgres", "delta"]):
        for digests in (True, False):
            if (not digests and (args.skip_rows or len(sinks) > 1)) or (sinks == ["postgres"] and digests):
                continue
            took, results = run_verify(info, work, sinks, digests, args.chunk_size)
            _equal(results)
            by = {r.sink: r.digest_chunks for r in results}
            runs.append((sinks, digests, took, by, results[0].chunks))
            print(f"  {'+'.join(sinks)} {'digest' if digests else 'rows'}: {took:.2f} s", flush=True)
    changed = {}
    if args.changes:
        want = set(change_sink(info, args.changes))
        found: dict[str, list] = {"verify": [], "reladiff": []}
        for _ in range(args.repeat):
            took, results = run_verify(info, work, ["postgres"], True, args.chunk_size)
            found["verify"].append((took, found_keys(results[0]), results[0]))
            if args.reladiff:
                took, keys = run_reladiff(info, args.reladiff)
                found["reladiff"].append((took, keys, None))
            print("  changed: " + ", ".join(f"{k} {v[-1][0]:.2f} s" for k, v in found.items() if v), flush=True)
        for name, tries in found.items():
            for _, got, _ in tries:
                if got != want:
                    raise SystemExit(
                        f"{name} found {len(got)} keys, not the {len(want)} changed: "
                        f"missed {sorted(want - got)[:10]}, wrong {sorted(got - want)[:10]}"
                    )
            if tries:
                changed[name] = (statistics.median(t for t, _, _ in tries), tries[-1][1], tries[-1][2])
                times[f"{name} changed"] = [t for t, _, _ in tries]
    n = args.rows
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    peer_text = f"; reladiff 0.6.0 (`-j 4`, every column) {peer:.2f} s = {n / peer:,.0f} rows/s" if peer else ""
    lines = [
        f"Machine: {os.cpu_count()} CPUs, {mem_gb:.0f} GB; load average at start {' '.join(f'{x:.2f}' for x in load)}.",
        "",
        f"{n:,} rows, chunk size {args.chunk_size:,}. Baselines in the same run: pymysql `SELECT *` of the table "
        f"{base:.2f} s = {n / base:,.0f} rows/s{peer_text}. `SELECT *`, verify into PostgreSQL (digest) and "
        f"reladiff: medians of {args.repeat} alternating runs each (every run below); the other rows: one run.",
        "",
        "| sinks | compare | wall s | rows/s per sink | vs SELECT * | vs reladiff | chunks settled by digest "
        "| target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for sinks, digests, took, by, chunks in runs:
        per_sink = n * len(sinks) / took
        settled = ", ".join(f"{k} {v}/{chunks}" for k, v in by.items())
        vs_peer = f"{peer / took * len(sinks):.2f}x" if peer and sinks == ["postgres"] else ""
        lines.append(
            f"| {'+'.join(sinks)} | {'digest' if digests else 'rows'} | {took:.2f} | {per_sink:,.0f} | "
            f"{base / took * len(sinks):.2f}x | {vs_peer} | {settled} | {'met' if per_sink >= TARGET else 'not met'} "
            f"(>= {TARGET:,}) |"
        )
    if changed:
        took, got, r = changed["verify"]
        lines += [
            "",
            f"{args.changes} rows changed in the PostgreSQL copy (`name`, one every {EVERY:,} keys); "
            "each tool must report exactly those keys.",
            "",
            "| tool | wall s | rows/s | keys found | vs reladiff | vs SELECT * "
            "| chunks: by digest / narrowed / differing |",
            "|---|---|---|---|---|---|---|",
        ]
        peer_took = changed["reladiff"][0] if "reladiff" in changed else None
        for name, (t, keys, res) in changed.items():
            vs = f"{peer_took / t:.2f}x" if peer_took else ""
            detail = (
                f"{res.digest_chunks} / {res.narrowed_chunks} / {res.mismatched_chunks} of {res.chunks}" if res else ""
            )
            label = "`cdc verify --sink postgres`" if name == "verify" else "reladiff 0.6.0 `-j 4`"
            lines.append(f"| {label} | {t:.2f} | {n / t:,.0f} | {len(keys)} | {vs} | {base / t:.2f}x | {detail} |")
        if peer:
            unchanged = next(t for s_, d, t, _, _ in runs if s_ == ["postgres"] and d)
            ratios = [peer / unchanged] + ([peer_took / took] if peer_took else [])
            ok = all(x >= PEER_RATIO for x in ratios)
            lines += ["", f"Target: >= {PEER_RATIO}x reladiff's rows/s, both cases: {'met' if ok else 'not met'}."]
    lines += [
        "",
        "Every run, s: " + "; ".join(f"{k}: {', '.join(f'{t:.2f}' for t in v)}" for k, v in times.items() if v) + ".",
    ]
    print("\n".join(lines))
    if args.record:
        head = (
            f"### verify: unchanged table and {args.changes} scattered differences, next to reladiff — "
            f"{time.strftime('%Y-%m-%d %H:%M')}, commit {commit_label()} "
            f"(`bench/verify_bench.py --rows {n}{' --reladiff ...' if args.reladiff else ''}`)"
        )
        append_results([head, "", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
