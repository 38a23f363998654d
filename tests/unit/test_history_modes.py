"""Sink table modes (merger.history.modes): the configuration's `tables:` entries, the
columns each mode asks of a batch, and the commit time the records carry for them."""

from __future__ import annotations

import dataclasses

import pytest

from cdc.config import ConfigError, MergerConfig, load_model
from cdc.tablespec import ColumnSpec, TableSpec
from cdc.wire.position import EventPosition
from merger.batch.records import ParsedRecord, change_event, commit_us_of, decode
from merger.batch.tables import TableRuntime
from merger.dblog import Reconciler
from merger.history.changelog import BEFORE_AFTER
from merger.history.modes import (
    BEFORE_IMAGE,
    COMMIT_US,
    LATEST,
    ChangelogMode,
    LatestMode,
    SCD2Mode,
    TableModes,
    before_column,
    mode_of,
    table_modes,
)
from merger.history.scd2 import HistoryOptionsError
from merger.schema.canonical import SourceModes
from merger.sources import source_kind
from tests.support import readback


def _load(tmp_path, sinks: dict) -> MergerConfig:
    import yaml

    path = tmp_path / "merger.yaml"
    path.write_text(yaml.safe_dump({"sinks": sinks}))
    return load_model(MergerConfig, str(path))


def test_config_entries_become_modes(tmp_path):
    cfg = _load(
        tmp_path,
        {
            "postgres": {
                "tables": {
                    "shop.orders": {"mode": "scd2", "track_history_except": ["updated_at"]},
                    "shop.pay": {"mode": "changelog", "image": "before_after"},
                    "shop.log": {"mode": "changelog"},
                    "shop.plain": {"mode": "latest"},
                }
            }
        },
    )
    modes = table_modes({k: v.model_dump() for k, v in cfg.sinks.postgres.tables.items()})
    assert modes.of(("shop", "orders")) == SCD2Mode(None, ("updated_at",))
    assert modes.of("shop.pay") == ChangelogMode(BEFORE_AFTER)
    assert modes.of("shop.log") == ChangelogMode("after")
    assert modes.of("shop.plain") is LATEST
    assert modes.of(("shop", "other")) is LATEST  # a table not named keeps the latest state
    assert modes.extra_columns("shop.orders") == {COMMIT_US} == modes.extra_columns("shop.log")
    assert modes.extra_columns("shop.pay") == {COMMIT_US, BEFORE_IMAGE}
    assert modes.extra_columns("shop.other") == frozenset()


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"mode": "nope"}, "'latest', 'scd2', 'changelog'"),
        ({"mode": "scd2", "track_history": ["a"], "track_history_except": ["b"]}, "not both"),
        ({"mode": "scd2", "track_history": []}, "lists no column"),
        ({"mode": "changelog", "track_history": ["a"]}, "unknown key"),
        ({"mode": "changelog", "image": "before"}, "after"),
    ],
)
def test_a_bad_entry_is_one_line(tmp_path, entry, message):
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, {"postgres": {"tables": {"shop.orders": entry}}})
    assert message in str(exc.value) and "sinks.postgres.tables" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_table_name_must_be_qualified(tmp_path):
    with pytest.raises(ConfigError, match="'orders' must be <database>.<table>"):
        _load(tmp_path, {"postgres": {"tables": {"orders": {"mode": "changelog"}}}})


def test_scd2_mode_options_check_the_keys():
    assert SCD2Mode(("a",)).options(["id"]).tracks("a")
    assert not SCD2Mode(("a",)).options(["id"]).tracks("b")
    with pytest.raises(HistoryOptionsError, match="key column"):
        SCD2Mode(("id",)).options(["id"])
    with pytest.raises(HistoryOptionsError):
        ChangelogMode("sideways")
    with pytest.raises(HistoryOptionsError, match="latest, scd2, changelog"):
        mode_of({"mode": "sideways"})
    assert LatestMode().extra_columns == frozenset()
    assert TableModes().of(("a", "b")) is LATEST


def test_commit_time_of_a_payload():
    assert commit_us_of({"source": {"ts_ms": 1700000000000, "ts_us": 1700000000000123}}) == 1700000000000123
    assert commit_us_of({"source": {"ts_ms": 1700000000000}}) == 1700000000000000
    assert commit_us_of({"source": {}}) is None
    assert commit_us_of(None) is None
    assert commit_us_of({"source": {"ts_ms": True}}) is None  # not a number


def _runtime() -> TableRuntime:
    cols = (
        ColumnSpec("id", "int", nullable=False),
        ColumnSpec("v", "varchar", length=20, charset="utf8mb4"),
    )
    cols = tuple(dataclasses.replace(c, position=i) for i, c in enumerate(cols, 1))
    rt = TableRuntime("shop.t", TableSpec("shop", "t", cols, ("id",)), ["id"], 1, Reconciler(1))
    rt.set_spec(rt.spec, SourceModes())
    return rt


def _event(offset: int, op: str, row: dict, ts_ms: int):
    record = {"topic": "cdc.shop.t", "partition": 0, "offset": offset}
    payload = {"op": op, ("before" if op == "d" else "after"): row, "source": {"ts_ms": ts_ms}}
    return change_event(
        ParsedRecord(record, {}, payload, EventPosition("b.000001", 100 + offset, 0)), source_kind("ingest")
    )


def test_decode_adds_the_commit_time_only_when_a_mode_asks():
    evs = [_event(1, "c", {"id": 1, "v": "a"}, 1_000), _event(2, "d", {"id": 1}, 2_000)]
    assert [ev.commit_us for ev in evs] == [1_000_000, 2_000_000]
    bad = []
    plain = decode(evs, _runtime(), lambda ev, why: bad.append(why))
    assert COMMIT_US not in plain.table.column_names
    timed = decode(evs, _runtime(), lambda ev, why: bad.append(why), frozenset({COMMIT_US}))
    assert timed.table.column(COMMIT_US).to_pylist() == [1_000_000, 2_000_000]
    assert timed.table.column("_cdc_op").to_pylist() == ["c", "d"] and not bad


def test_decode_of_older_changes_after_a_ddl_keeps_the_commit_time():
    rt = _runtime()
    evs = [_event(1, "c", {"id": 1, "v": "a"}, 1_000), _event(5, "u", {"id": 1, "v": "b"}, 3_000)]
    rt.spec_since = evs[1].order  # the first change is older than the definition: decoded leniently
    timed = decode(evs, rt, lambda ev, why: None, frozenset({COMMIT_US}))
    assert timed.table.column(COMMIT_US).to_pylist() == [1_000_000, 3_000_000]


def _changed(offset: int, op: str, before: dict | None, after: dict | None):
    record = {"topic": "cdc.shop.t", "partition": 0, "offset": offset}
    payload = {"op": op, "before": before, "after": after, "source": {"ts_ms": 1_000}}
    return change_event(
        ParsedRecord(record, {}, payload, EventPosition("b.000001", 100 + offset, 0)), source_kind("ingest")
    )


BEFORE_V = before_column("v")


def test_decode_adds_the_before_image_only_when_a_mode_asks():
    evs = [
        _changed(1, "r", None, {"id": 1, "v": "a"}),
        _changed(2, "c", None, {"id": 2, "v": "x"}),
        _changed(3, "u", {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
        _changed(4, "d", {"id": 1, "v": "b"}, None),
    ]
    assert [ev.before for ev in evs] == [None, None, {"id": 1, "v": "a"}, {"id": 1, "v": "b"}]
    plain = decode(evs, _runtime(), lambda ev, why: None, frozenset({COMMIT_US}))
    assert not [c for c in plain.table.column_names if c.startswith(BEFORE_IMAGE)]  # a latest table's batch
    both = decode(evs, _runtime(), lambda ev, why: None, ChangelogMode(BEFORE_AFTER).extra_columns)
    t = both.table
    assert t.column(before_column("id")).to_pylist() == [None, None, 1, 1]
    assert t.column(BEFORE_V).to_pylist() == [None, None, "a", "b"]
    assert t.column("v").to_pylist() == ["a", "x", "b", "b"]  # the after image as before (a delete: its before)
    # typed like the column, decoded by the same converter
    assert t.schema.field(before_column("id")).type == t.schema.field("id").type
    assert t.schema.field(BEFORE_V).type == t.schema.field("v").type
    assert ChangelogMode("after").extra_columns == {COMMIT_US}


@pytest.mark.parametrize("op", ["u", "d"])
def test_an_update_or_delete_without_a_before_image_pauses_a_before_after_table(op):
    from merger.errors import BadChange

    after = {"id": 1, "v": "b"} if op == "u" else None
    evs = [_changed(7, op, None, after)] if op == "u" else []
    if op == "d":  # a delete without before has no image at all: it is a bad record already
        evs = [_changed(7, "u", None, {"id": 1, "v": "b"})._replace(op="d", image={"id": 1})]
    with pytest.raises(BadChange, match="no before image.*binlog_row_image=FULL"):
        decode(evs, _runtime(), lambda ev, why: None, ChangelogMode(BEFORE_AFTER).extra_columns)
    # an image after table does not need it
    assert decode(evs, _runtime(), lambda ev, why: None, frozenset({COMMIT_US})).table.num_rows == 1


def test_a_partial_before_image_pauses_a_before_after_table():
    from merger.errors import BadChange

    evs = [_changed(7, "u", {"id": 1}, {"id": 1, "v": "b"})]  # binlog_row_image=MINIMAL: the key only
    with pytest.raises(BadChange, match="a partial before image"):
        decode(evs, _runtime(), lambda ev, why: None, ChangelogMode(BEFORE_AFTER).extra_columns)


def test_decode_of_older_changes_after_a_ddl_keeps_the_before_image():
    rt = _runtime()
    evs = [_changed(1, "u", {"id": 1, "v": "a"}, {"id": 1, "v": "b"}), _changed(5, "c", None, {"id": 2, "v": "c"})]
    rt.spec_since = evs[1].order  # the first change is decoded leniently
    t = decode(evs, rt, lambda ev, why: None, ChangelogMode(BEFORE_AFTER).extra_columns).table
    assert t.column(BEFORE_V).to_pylist() == ["a", None]
    assert t.column(before_column("id")).to_pylist() == [1, None]


def test_a_before_image_that_does_not_decode_is_a_bad_record():
    bad = []
    evs = [
        _changed(1, "u", {"id": "not a number", "v": "a"}, {"id": 1, "v": "b"}),
        _changed(2, "u", {"id": 2, "v": "a"}, {"id": 2, "v": "c"}),
    ]
    t = decode(evs, _runtime(), lambda ev, why: bad.append(ev.seq), ChangelogMode(BEFORE_AFTER).extra_columns)
    assert len(bad) == 1 and t.table.column(BEFORE_V).to_pylist() == ["a"]


def test_a_window_keeps_its_high_markers_time_across_a_restart():
    rec = Reconciler(2)
    rec.open_window("w1", ["c1"], 10.0)
    rec.on_marker(0, 5, "w1", "LOW", time_us=1_000)
    rec.on_marker(1, 5, "w1", "LOW", time_us=1_000)
    rec.on_marker(0, 9, "w1", "HIGH", time_us=7_000_000)
    rec.on_marker(1, 9, "w1", "HIGH", time_us=7_000_000)
    assert rec.window("w1").high_time_us == 7_000_000
    again = Reconciler.from_dict(rec.to_dict())
    assert again.window("w1").high_time_us == 7_000_000
    # a state saved before windows kept it loads, without one
    saved = rec.to_dict()
    for w in saved["windows"]:
        w.pop("high_time_us")
    assert Reconciler.from_dict(saved).window("w1").high_time_us is None


def test_the_mode_of_a_table_in_a_sink(tmp_path):
    cfg = _load(tmp_path, {"postgres": {"tables": {"shop.log": {"mode": "changelog"}}}, "delta": {"path": "/x"}})
    assert cfg.sinks.table_mode("postgres", "shop.log") == "changelog"
    assert cfg.sinks.table_mode("postgres", "shop.other") == "latest"
    assert cfg.sinks.table_mode("delta", "shop.log") == "latest"
    assert cfg.sinks.table_mode("kafka_changelog", "shop.log") == "latest"


def test_key_mode_unique_refuses_history_tables(tmp_path):
    import yaml

    path = tmp_path / "merger.yaml"
    path.write_text(
        yaml.safe_dump({"key_mode": "unique", "sinks": {"postgres": {"tables": {"shop.log": {"mode": "changelog"}}}}})
    )
    with pytest.raises(ConfigError, match="history modes are not available with key_mode: unique"):
        load_model(MergerConfig, str(path))


def test_the_delta_sink_takes_every_mode(tmp_path):
    delta = {
        "path": str(tmp_path / "delta"),
        "tables": {
            "shop.t": {"mode": "latest"},
            "shop.log": {"mode": "changelog"},
            "shop.both": {"mode": "changelog", "image": "before_after"},
            "shop.h": {"mode": "scd2", "track_history_except": ["seen"]},
        },
    }
    cfg = _load(tmp_path, {"delta": delta})
    assert cfg.sinks.table_mode("delta", "shop.t") == "latest"
    assert cfg.sinks.table_mode("delta", "shop.log") == "changelog"
    assert cfg.sinks.table_mode("delta", "shop.h") == "scd2"  # cdc verify compares "latest" tables only: skipped
    from merger.sinks.registry import build_sinks

    (sink,) = build_sinks(cfg)  # the sink is given the modes of its section
    assert sink.modes.of("shop.log") == ChangelogMode("after")
    assert sink.modes.of("shop.both") == ChangelogMode(BEFORE_AFTER)
    assert sink.modes.of("shop.t") is LATEST
    assert sink.modes.of("shop.h") == SCD2Mode(None, ("seen",))


def test_key_mode_unique_refuses_delta_history_tables(tmp_path):
    import yaml

    path = tmp_path / "merger.yaml"
    path.write_text(
        yaml.safe_dump(
            {"key_mode": "unique", "sinks": {"delta": {"path": "/x", "tables": {"shop.log": {"mode": "changelog"}}}}}
        )
    )
    with pytest.raises(ConfigError, match="sinks.delta.tables gives shop.log mode changelog"):
        load_model(MergerConfig, str(path))


def test_a_latest_delta_table_takes_batches_that_carry_the_commit_time(tmp_path):
    """A table in a history mode in PostgreSQL gets _cdc_commit_us (and, for image
    before_after, _cdc_before_*) in every sink's batch: the Delta sink (latest state)
    leaves them out of its rows."""
    import pyarrow as pa

    from merger.sinks.delta import DeltaSink

    sink = DeltaSink(str(tmp_path / "delta"))
    sink.ensure_table(("db", "t"), pa.schema([("id", pa.int32()), ("v", pa.string())]), ["id"])

    def batch(rows):
        return pa.table(
            {
                "id": pa.array([r[0] for r in rows], pa.int32()),
                "v": pa.array([r[1] for r in rows], pa.string()),
                "_cdc_op": pa.array([r[2] for r in rows], pa.string()),
                "_cdc_seq": pa.array([r[3] for r in rows], pa.int64()),
                COMMIT_US: pa.array([1_000_000] * len(rows), pa.int64()),
                # and a before image, for a change log of image before_after in another sink
                before_column("id"): pa.array([None] * len(rows), pa.int32()),
                BEFORE_V: pa.array(["old"] * len(rows), pa.string()),
            }
        )

    assert sink.apply(("db", "t"), 1, batch([(1, "a", "r", 5), (2, "b", "r", 5)]))
    assert sink.apply(("db", "t"), 2, batch([(1, "a2", "u", 6), (2, None, "d", 7), (3, "c", "c", 8)]))
    rows = sorted(readback.rows(sink, ("db", "t")).to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "v": "a2"}, {"id": 3, "v": "c"}]


def test_a_snapshot_window_gives_a_before_after_log_a_null_before_image():
    """Snapshot rows come from the window emitter, not from ``decode``."""
    import pyarrow as pa

    from merger.batch.emission import WindowEmitter
    from merger.dblog import Window

    class Writer:
        def __init__(self, extra):
            self.extra = extra

        def extra_columns(self, rt):
            return self.extra

    rt = _runtime()
    rows = pa.table(
        {"id": pa.array([1], pa.int32()), "v": ["a"], "_cdc_op": ["r"], "_cdc_seq": pa.array([9], pa.int64())}
    )
    window = Window("w", ("c",), 1.0)
    both = WindowEmitter(None, None, Writer(ChangelogMode(BEFORE_AFTER).extra_columns), 10)._timed(rt, window, rows)
    assert both.column(before_column("id")).to_pylist() == [None] == both.column(BEFORE_V).to_pylist()
    assert both.schema.field(BEFORE_V).type == rt.schema.field("v").type
    after = WindowEmitter(None, None, Writer(ChangelogMode("after").extra_columns), 10)._timed(rt, window, rows)
    assert after.column_names == [*rows.column_names, COMMIT_US]
