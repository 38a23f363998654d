"""Row-decoding micro-benchmark: how fast the binlog reader turns a backlog into rows.

A backlog of N rows (default 200,000; table ``(id INT PRIMARY KEY, a INT, b VARCHAR(40),
c DECIMAL(10,2), d DATETIME(3))`` as in bench/ingest_throughput.py; transactions of 1,000)
is written twice: as one-row INSERT statements ("single": one TABLE_MAP + one rows event
per row) and as one multi-row INSERT per transaction ("multi"). Each backlog is then read
with a non-blocking BinLogStreamReader from the GTID before it
(``auto_position=gtid, is_mariadb=True, blocking=False``) up to the last transaction's
commit, and every row is decoded (``event.rows``), with:

* ``stock``:  mysql-replication as shipped (its TableMapEvent and rows event classes);
* ``cached``: the library's reader and rows decoding plus ingest's table-map cache
  (``CachedTableMapEvent``): ingest before ingest.rowdecode;
* ``fast``:   ``ingest.binlog.open_reader`` (table-map cache, generated row decoders, lean
  packet path).

Prints rows/s per variant and workload (best of ``--repeat`` runs), by wall clock and by
CPU time of the reading process (the latter is steadier on a shared machine). Nothing goes
to Kafka. All variants carry the fix of the library's MariaDB COM_BINLOG_DUMP length (see
ingest/binlog.py): without it a non-blocking MariaDB stream ends in a connection reset and
the library replays it from the start.

    .venv/bin/python bench/decode_micro.py [--rows 200000] [--repeat 3] [--variants stock,cached,fast]
        [--modes single,multi] [--state-dir /tmp/rd-stack] [--reuse]

The MariaDB of the local embedded stack in --state-dir is used (started if not running,
left running). --reuse keeps a backlog of the same size recorded in the state dir.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import pymysql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cdc import stack as local_stack  # noqa: E402

DB = "bench_rowdecode"
DDL = "CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b VARCHAR(40), c DECIMAL(10,2), d DATETIME(3))"


def _root(info):
    return pymysql.connect(
        host=info.mariadb.host,
        port=info.mariadb.port,
        user="root",
        password=info.mariadb.root_password,
        autocommit=True,
    )


def make_backlog(info, mode: str, rows: int, trx_size: int = 1000) -> dict:
    conn = _root(info)
    table = f"{DB}.t_{mode}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(DDL.format(t=table))
        cur.execute("SELECT @@gtid_binlog_pos")
        start = cur.fetchone()[0]
        for trx in range(rows // trx_size):
            base = trx * trx_size
            cur.execute("BEGIN")
            if mode == "single":
                for i in range(trx_size):
                    cur.execute(f"INSERT INTO {table} VALUES (%s, %s, 'some text value', 12.34, NOW(3))", (base + i, i))
            else:
                cur.execute(
                    f"INSERT INTO {table} VALUES "
                    + ",".join(f"({base + i},{i},'some text value',12.34,NOW(3))" for i in range(trx_size))
                )
            cur.execute("COMMIT")
        cur.execute("SELECT @@gtid_binlog_pos")
        end = cur.fetchone()[0]
    conn.close()
    return {"mode": mode, "rows": rows, "table": table, "gtid_start": start, "gtid_end": end}


def _settings(info) -> dict:
    return {
        "host": info.mariadb.host,
        "port": info.mariadb.port,
        "user": "root",
        "password": info.mariadb.root_password,
    }


@contextlib.contextmanager
def _cached_table_maps():
    """ingest before rowdecode: the library's reader and rows decoding, with the table-map
    cache patched into the library's packet wrapper."""
    from pymysqlreplication.constants import BINLOG
    from pymysqlreplication.packet import BinLogPacketWrapper

    from ingest.binlog import CachedTableMapEvent

    event_map = BinLogPacketWrapper._BinLogPacketWrapper__event_map
    saved = event_map[BINLOG.TABLE_MAP_EVENT]
    event_map[BINLOG.TABLE_MAP_EVENT] = CachedTableMapEvent
    try:
        yield CachedTableMapEvent
    finally:
        event_map[BINLOG.TABLE_MAP_EVENT] = saved


def _fixed_reader_class():
    from pymysqlreplication import BinLogStreamReader

    class Reader(BinLogStreamReader):
        # MariaDB non-blocking dumps end in a reset (and a replay from the start) without
        # this: the library declares the COM_BINLOG_DUMP payload one byte short
        def _BinLogStreamReader__set_mariadb_settings(self):
            prelude = BinLogStreamReader._BinLogStreamReader__set_mariadb_settings(self)
            return (len(prelude) - 4).to_bytes(4, "little") + prelude[4:]

    return Reader


def read_backlog(info, backlog: dict, variant: str, timeout_s: float = 600) -> tuple[int, float, float]:
    """Decode every row of the backlog (from its GTID start up to the end GTID's commit).
    Returns (rows, wall seconds, CPU seconds of this process)."""
    from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

    from ingest import binlog

    table = backlog["table"].split(".", 1)[1]
    end_gtid = backlog["gtid_end"]
    with contextlib.ExitStack() as stack:
        if variant == "fast":
            reader = binlog.open_reader(
                {
                    "host": info.mariadb.host,
                    "port": info.mariadb.port,
                    "user": "root",
                    "password": info.mariadb.root_password,
                },
                7301,
                backlog["gtid_start"],
                blocking=False,
            )
        else:
            table_map_cls = stack.enter_context(_cached_table_maps()) if variant == "cached" else TableMapEvent
            reader = _fixed_reader_class()(
                connection_settings=_settings(info),
                server_id=7302,
                is_mariadb=True,
                auto_position=backlog["gtid_start"],
                blocking=False,
                resume_stream=True,
                only_events=[
                    MariadbGtidEvent,
                    QueryEvent,
                    XidEvent,
                    RotateEvent,
                    table_map_cls,
                    WriteRowsEvent,
                    UpdateRowsEvent,
                    DeleteRowsEvent,
                ],
            )
        stack.callback(reader.close)
        n = 0
        gtid = None
        row_classes = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
        t0 = time.perf_counter()
        c0 = time.process_time()
        deadline = t0 + timeout_s
        for event in reader:
            if isinstance(event, row_classes):
                if event.table == table:
                    n += len(event.rows)
            elif isinstance(event, MariadbGtidEvent):
                gtid = event.gtid
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"{variant}: backlog not read in {timeout_s}s")
            elif isinstance(event, XidEvent) and gtid == end_gtid:
                break
        took = time.perf_counter() - t0
        cpu = time.process_time() - c0
    return n, took, cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default="stock,cached,fast")
    ap.add_argument("--modes", default="single,multi")
    ap.add_argument("--state-dir", default="/tmp/rd-stack")
    ap.add_argument("--reuse", action="store_true", help="reuse a recorded backlog of the same size")
    args = ap.parse_args(argv)

    state_dir = Path(args.state_dir)
    info = local_stack.up(state_dir, components=("mariadb",))
    record = state_dir / "decode_micro_backlog.json"
    known = json.loads(record.read_text()) if args.reuse and record.exists() else {}
    backlogs = {}
    for mode in args.modes.split(","):
        b = known.get(mode)
        if not b or b["rows"] != args.rows:
            t0 = time.monotonic()
            b = make_backlog(info, mode, args.rows)
            print(f"backlog {mode}: {args.rows} rows written in {time.monotonic() - t0:.1f}s", flush=True)
        backlogs[mode] = b
    known.update(backlogs)
    record.write_text(json.dumps(known))

    variants = args.variants.split(",")
    results = {}
    for mode, b in backlogs.items():
        for variant in variants:
            best = None
            for _ in range(args.repeat):
                n, took, cpu = read_backlog(info, b, variant)
                if n != b["rows"]:
                    raise SystemExit(f"{variant}/{mode}: decoded {n} rows, expected {b['rows']}")
                best = (took, cpu) if best is None else (min(best[0], took), min(best[1], cpu))
            results[(mode, variant)] = (b["rows"] / best[0], b["rows"] / best[1])
            print(
                f"{mode:6s} {variant:6s} {b['rows']:>8d} rows  wall {best[0]:7.2f}s "
                f"{b['rows'] / best[0]:>9,.0f} rows/s   cpu {best[1]:7.2f}s {b['rows'] / best[1]:>9,.0f} rows/s",
                flush=True,
            )
    print()
    print(f"rows/s, best of {args.repeat} (wall clock / CPU time of the reading process)")
    print(f"| workload ({args.rows:,} rows) | " + " | ".join(variants) + " | fast/stock | fast/cached |")
    print("|---|" + "---|" * (len(variants) + 2))
    for mode in backlogs:
        cells = [f"{results[(mode, v)][0]:,.0f} / {results[(mode, v)][1]:,.0f}" for v in variants]
        ratios = []
        for base in ("stock", "cached"):
            if (mode, "fast") in results and (mode, base) in results:
                f, s_ = results[(mode, "fast")], results[(mode, base)]
                ratios.append(f"{f[0] / s_[0]:.1f}x / {f[1] / s_[1]:.1f}x")
            else:
                ratios.append("")
        label = "one-row INSERT events" if mode == "single" else "multi-row INSERT events"
        print(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
