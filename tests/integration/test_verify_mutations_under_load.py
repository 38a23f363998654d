"""Every mutation of the verify mutation matrix (tests/integration/test_verify_mutations.py)
found by position-consistent `cdc verify` in sinks the pipeline wrote, while a workload
of about 1,000 changes/s runs on other rows of the same table (issue 26).

The source table has the tricky columns and rows of test_verify_mutations (unsigned
BIGINT max, DECIMAL(65,30), BIT(1/12/64), TIME beyond ±24 h, zero dates under
sql_mode='', CHAR, VARBINARY/BINARY zero bytes, NUL, JSON, ENUM '', FLOAT, GEOMETRY,
BOOLEAN...), copied once per mutation (mutation i damages the copy ``id + 10 * i`` of the
row it names, so every mutation has a key of its own), and a few thousand plain rows
(ids >= 1000) that the workload updates, inserts and deletes. Ingest and the merger write
both sinks (Delta, PostgreSQL) in the pipeline's own column types. Then, round after
round while the workload runs, each sink is damaged behind the merger's back with the
matrix's mutations (the value a mutation writes is the matrix's, in the type the
pipeline gave the sink column), and `cdc verify --json` must name exactly each damaged
key with exactly its column (or the missing/extra key) in each sink, and nothing of the
workload's rows in flight; `cdc repair` then puts every damage right and verifies the
table equal again. Real MariaDB, ingest, the broker, the merger (Spark local mode).

No mutation is left out for either sink: every one's value can be written in the type the
pipeline gives the column. The pipeline's types differ from the hand-written copies' in
two columns only, and the damage follows them: a MariaDB JSON column (a LONGTEXT) is text
in PostgreSQL, not jsonb, so the changed JSON goes in as its text; BOOLEAN is tinyint(1),
an integer column in both sinks (the source row holds 5), so the flipped boolean goes in
as 0."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from tests.conftest import IS_CI
from tests.integration.test_verify_mutations import COLUMNS, SOURCE_ROWS, mutation_matrix, sink_rows
from tests.merger_harness import (
    SinkChecker,
    Workload,
    pg_conn,
    root_conn,
    run_cdc,
)

pytestmark = pytest.mark.integration

SINKS = ("delta", "postgres")
MUTATIONS = mutation_matrix()
COPY_STEP = 10  # mutation i damages key + COPY_STEP * i (the matrix's keys are 1, 2, 3 and 99)
FIRST_LOAD_ID, LAST_LOAD_ID = 1000, 3999  # the workload's rows
RATE = 1000  # statements per second asked of the workload
# the mutations are dealt round-robin into rounds of damage, verify, repair
# (under CI one round with every mutation: the suite's budget; the rounds after it repeat the cycle)
ROUNDS = 1 if IS_CI else 3
assert 99 + COPY_STEP * len(MUTATIONS) < FIRST_LOAD_ID, "the damaged keys must stay out of the workload's reach"


@dataclass
class Damage:
    """One mutation of the matrix as it is applied to one sink: ``kind`` 'different' (the
    column ``column`` of key ``key`` set to ``value``), 'missing' (key deleted) or 'extra'
    (the row ``value`` inserted at key ``key``)."""

    mutation: str
    kind: str
    key: int
    column: str | None = None
    value: object = None


def damages_of(index: int, name: str, mutate, expected) -> dict[str, Damage]:
    """The damage mutation ``index`` does to each sink: what it changes in the matrix's
    hand-written sink rows (which must be exactly what the matrix expects verify to find),
    moved to the mutation's own copy of the row."""
    out = {}
    for sink in SINKS:
        right = {r["id"]: r for r in sink_rows(sink)}
        wrong = {r["id"]: r for r in mutate(sink_rows(sink), sink)}
        changed = [
            (k, c, wrong[k][c]) for k in right.keys() & wrong.keys() for c in COLUMNS if right[k][c] != wrong[k][c]
        ]
        missing, extra = sorted(right.keys() - wrong.keys()), sorted(wrong.keys() - right.keys())
        shift = COPY_STEP * index
        if expected[0] == "different":
            assert not missing and not extra and [(k, c) for k, c, _ in changed] == [tuple(expected[1:])], (name, sink)
            ((key, column, value),) = changed
            out[sink] = Damage(name, "different", key + shift, column, value)
        else:
            assert not changed and {"missing": missing, "extra": extra}[expected[0]] == [expected[1]], (name, sink)
            key = expected[1] + shift
            row = {**wrong[expected[1]], "id": key} if expected[0] == "extra" else None
            out[sink] = Damage(name, expected[0], key, None, row)
    return out


def _pg_value(value, pg_type: str):
    """A matrix value as the pipeline's PostgreSQL column takes it."""
    from psycopg.types.json import Jsonb

    if isinstance(value, (dict, list)):  # a JSON value: jsonb, or its text where the pipeline made the column text
        return Jsonb(value) if pg_type == "jsonb" else json.dumps(value)
    if isinstance(value, bool) and pg_type in ("smallint", "integer", "bigint"):
        return int(value)  # BOOLEAN is tinyint(1): the pipeline stores the integer
    return value


def _delta_value(value, arrow_type: pa.DataType):
    """A matrix value as the pipeline's Delta column takes it."""
    if isinstance(value, bool) and pa.types.is_integer(arrow_type):
        return int(value)  # BOOLEAN is tinyint(1): the pipeline stores the integer
    return value


def damage_postgres(stack, db: str, damages: list[Damage]) -> None:
    """The damages, written into the pipeline's PostgreSQL table by hand, in one transaction."""
    from psycopg import sql

    table = sql.Identifier(db, "tricky")
    with pg_conn(stack) as c:
        types = dict(
            c.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = 'tricky'",
                (db,),
            ).fetchall()
        )
        with c.transaction():
            for d in damages:
                if d.kind == "different":
                    c.execute(
                        sql.SQL("UPDATE {} SET {} = %s WHERE id = %s").format(table, sql.Identifier(d.column)),
                        (_pg_value(d.value, types[d.column]), d.key),
                    )
                elif d.kind == "missing":
                    c.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(table), (d.key,))
                else:
                    # a row only the sink holds, at a sequence below any the source's positions give
                    names = [*COLUMNS, "_cdc_seq"]
                    row = {**d.value, "_cdc_seq": 1}
                    c.execute(
                        sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                            table,
                            sql.SQL(", ").join(map(sql.Identifier, names)),
                            sql.SQL(", ").join(sql.Placeholder() * len(names)),
                        ),
                        [_pg_value(row[n], types[n]) for n in names],
                    )


def _delta_commit(step) -> None:
    """``step()`` (one commit to the Delta table), again while it conflicts with the merger's."""
    for attempt in range(20):
        try:
            step()
            return
        except CommitFailedError:
            if attempt == 19:
                raise
            time.sleep(0.5)


def damage_delta(path: Path, damages: list[Damage]) -> None:
    """The damages, written into the pipeline's Delta table behind the merger's back: the
    changed values in one MERGE, the deletes, the extra rows appended."""
    changed = [d for d in damages if d.kind == "different"]
    gone = [d.key for d in damages if d.kind == "missing"]
    extra = [d for d in damages if d.kind == "extra"]

    def update() -> None:
        table = DeltaTable(str(path))
        rows = table.to_pyarrow_table(filters=[("id", "in", [d.key for d in changed])])
        by_key = {r["id"]: r for r in rows.to_pylist()}
        assert sorted(by_key) == sorted(d.key for d in changed), "a row to damage is not in the Delta table"
        for d in changed:
            by_key[d.key][d.column] = _delta_value(d.value, rows.schema.field(d.column).type)
        source = pa.Table.from_pylist(list(by_key.values()), schema=rows.schema)
        table.merge(source, "t.id = s.id", source_alias="s", target_alias="t").when_matched_update_all().execute()

    def delete() -> None:
        DeltaTable(str(path)).delete(f"id IN ({', '.join(map(str, gone))})")

    def insert() -> None:
        schema = DeltaTable(str(path)).to_pyarrow_table(filters=[("id", "=", -1)]).schema
        rows = [
            {n: _delta_value(v, schema.field(n).type) for n, v in {**d.value, "_cdc_seq": 1}.items()} for d in extra
        ]
        write_deltalake(str(path), pa.Table.from_pylist(rows, schema=schema), mode="append")

    if changed:
        _delta_commit(update)
    if gone:
        _delta_commit(delete)
    if extra:
        _delta_commit(insert)


def problems(found: dict, damages: list[Damage]) -> list[str]:
    """What verify's result for one sink gets wrong about that sink's damages: a mutation
    not named as it should be, or anything named that no damage explains."""
    out = []
    missing = {k for (k,) in found["missing"]}
    extra = {k for (k,) in found["extra"]}
    different = {d["key"][0]: d["columns"] for d in found["different"]}
    for d in damages:
        if d.kind == "different" and (named := different.pop(d.key, None)) != [d.column]:
            out.append(f"{d.mutation}: key {d.key} column {d.column} not named alone (verify named: {named})")
        elif d.kind == "missing" and d.key not in missing:
            out.append(f"{d.mutation}: key {d.key} not named missing")
        elif d.kind == "extra" and d.key not in extra:
            out.append(f"{d.mutation}: key {d.key} not named extra")
    missing -= {d.key for d in damages if d.kind == "missing"}
    extra -= {d.key for d in damages if d.kind == "extra"}
    for what, keys in (("missing", missing), ("extra", extra), ("different", different)):
        if keys:
            out.append(f"false differences ({what}): {sorted(keys)[:20]}")
    if found["unlisted"]:
        out.append(f"{found['unlisted']} differing keys not listed")
    return out


def load_statement(rnd: random.Random) -> tuple[str, tuple]:
    """An update (many column types at once), insert or delete of one of the workload's rows."""
    k = rnd.randint(FIRST_LOAD_ID, LAST_LOAD_ID)
    op = rnd.random()
    if op < 0.6:
        return (
            "UPDATE tricky SET u = u + 1, d = d + 0.5, b12 = b12 ^ 1, t = ADDTIME(t, '0:00:01.5'), "
            "dt6 = dt6 + INTERVAL 1 SECOND, ts = ts + INTERVAL 1 SECOND, s = CONCAT('u', u), "
            "j = JSON_SET(j, '$.n', u), f = f + 1, bo = 1 - bo WHERE id = %s",
            (k,),
        )
    if op < 0.8:
        return (
            "INSERT INTO tricky (id, u, d, b1, b12, t, dt6, ts, dd, y, zd, s, vb, j, e, f, db, g, bo) VALUES "
            "(%s, 7, 1.5, 1, b'101', '-100:00:00', '2025-01-01 00:00:00.5', '2025-01-01 00:00:00.25', "
            "'2025-01-01', 2000, '2025-01-01', 'i', X'00ff', '{\"i\": 1}', 'b', 0.5, 0.25, POINT(1, 1), 1) "
            "ON DUPLICATE KEY UPDATE u = u + 2, s = 'dup', vb = X'01'",
            (k,),
        )
    return "DELETE FROM tricky WHERE id = %s", (k,)


def _cdc_json(*args: str, timeout: float = 480) -> tuple[int, dict]:
    res = run_cdc(*args, "--json", timeout=timeout)
    assert res.stdout.strip(), res.stderr
    return res.returncode, json.loads(res.stdout)


def _create_source(stack, db: str) -> None:
    conn = root_conn(stack)
    others = [c for c in COLUMNS if c != "id"]
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # the zero dates
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(f"CREATE DATABASE {db} CHARACTER SET utf8mb4")
            cur.execute(f"USE {db}")
            cur.execute(f"CREATE TABLE tricky ({', '.join(f'`{n}` {t}' for n, (t, _, _) in COLUMNS.items())})")
            cur.execute("SET SESSION sql_log_bin = 0")  # the snapshot of the new table brings them
            cur.execute(f"INSERT INTO tricky VALUES {', '.join(SOURCE_ROWS)}")
            for i in range(1, len(MUTATIONS)):
                cur.execute(
                    f"INSERT INTO tricky SELECT id + {COPY_STEP * i}, {', '.join(others)} FROM tricky WHERE id <= 3"
                )
            cur.execute(
                "INSERT INTO tricky SELECT seq, seq * 1000003, seq / 7, seq % 2, seq % 4096, seq, "
                "SEC_TO_TIME(seq * 97), '2024-01-01' + INTERVAL seq SECOND, '2024-01-01' + INTERVAL seq MINUTE, "
                "'2024-01-01' + INTERVAL seq DAY, 1901 + seq % 255, '2024-01-01', NULL, CONCAT('c', seq % 100), "
                "CONCAT('s', seq), UNHEX(HEX(seq)), 'ab', JSON_OBJECT('n', seq), ELT(1 + seq % 2, 'a', 'b'), 'x', "
                "seq / 3, seq * 1.5, POINT(seq, 1), seq % 2 "
                f"FROM seq_{FIRST_LOAD_ID}_to_{LAST_LOAD_ID}"
            )
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_mutation_is_found_and_repaired_under_load(stack, unique_name, pipeline):
    db = pipeline.database(f"vml_{unique_name}")
    table = f"{db}.tricky"
    damages = [damages_of(i, *m) for i, m in enumerate(MUTATIONS)]
    mcfg, merger, work, mark = pipeline.merger_config, pipeline.merger, pipeline.work, pipeline.mark()
    _create_source(stack, db)
    checker = SinkChecker(stack, work)
    workload = Workload(stack, db, load_statement, rate=RATE, session=("SET time_zone = '+00:00'",))
    verify = ("verify", "-c", str(mcfg), "--chunk-size", "1000", "--limit", "100", table)
    log = []
    started = time.monotonic()
    try:
        checker.wait_equal(db, "tricky", timeout_s=300, proc=merger)
        log.append(("sinks equal", time.monotonic() - started))
        workload.start()
        time.sleep(1)
        # undamaged, under load: no false difference
        code, data = _cdc_json(*verify)
        assert code == 0 and all(t["verdict"] == "equal" for t in data["tables"]), data
        log.append(("verify equal under load", time.monotonic() - started))

        for r in range(ROUNDS):
            chosen = damages[r::ROUNDS]
            by_sink = {sink: [d[sink] for d in chosen] for sink in SINKS}
            damage_postgres(stack, db, by_sink["postgres"])
            damage_delta(work / "delta" / db / "tricky", by_sink["delta"])
            log.append((f"round {r}: damaged", time.monotonic() - started))

            code, data = _cdc_json(*verify)
            log.append((f"round {r}: verified", time.monotonic() - started))
            found = {t["sink"]: t for t in data["tables"]}
            assert sorted(found) == sorted(SINKS), data
            wrong = [f"{sink}: {p}" for sink in SINKS for p in problems(found[sink], by_sink[sink])]
            assert not wrong, f"round {r}, workload at {workload.rate():.0f}/s:\n" + "\n".join(wrong)
            for t in found.values():
                assert t["verdict"] == "different" and t["confirmed_at"] is not None, t
            assert code == 1

            code, data = _cdc_json("repair", "-c", str(mcfg), "--chunk-size", "1000", "--timeout", "5m", table)
            log.append((f"round {r}: repaired", time.monotonic() - started))
            (rep,) = data["repairs"]
            assert rep["error"] is None, rep
            for sink in SINKS:
                kinds = [d.kind for d in by_sink[sink]]
                counts = {"inserted": kinds.count("missing"), "updated": kinds.count("different")}
                assert rep["by_sink"][sink] == {**counts, "deleted": kinds.count("extra")}, (sink, rep)
            keys = {d[s].key for d in chosen for s in SINKS}
            extra = {d[s].key for d in chosen for s in SINKS if d[s].kind == "extra"}
            assert rep["keys"] == len(keys) and rep["rows_deleted"] == len(extra), rep
            assert rep["rows_read"] == len(keys - extra), rep
            assert code == 0 and all(t["verdict"] == "equal" for t in data["tables"]), data["tables"]

        assert workload.rate() > RATE * 0.5, f"the workload ran at {workload.rate():.0f} statements/s"
        workload.stop()
        # the tests' own oracle (whole table, every row) once the workload has stopped
        checker.wait_equal(db, "tricky", timeout_s=180, proc=merger)
        assert merger.alive() and "Traceback" not in pipeline.merger_log_since(mark)
        log.append(("done", time.monotonic() - started))
    finally:
        workload.stop_event.set()
        checker.close()
        print(f"timings: {[(what, round(t, 1)) for what, t in log]}; workload {workload.statements} statements")
