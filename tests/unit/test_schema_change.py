"""merger.schema.change: which DDL re-snapshots, resets or rebuilds a table's sink tables
(pure), and the lenient decode of changes older than the DDL."""

from __future__ import annotations

import dataclasses

import pytest

from cdc.tablespec import ColumnSpec, TableSpec
from merger.schema.canonical import SourceModes, arrow_schema, json_converters
from merger.schema.change import DROP, FOLLOW, NONE, RESET, RESNAPSHOT, decide, diff_specs, rows_to_arrow_lenient

T = TableSpec(
    "db",
    "t",
    (
        ColumnSpec("id", "int", 1, nullable=False),
        ColumnSpec("v", "varchar", 2, length=20),
        ColumnSpec("d", "decimal", 3, length=10, scale=2),
    ),
    ("id",),
)


def _with(spec: TableSpec, *columns: ColumnSpec, drop: tuple = (), key: tuple | None = None, **change) -> TableSpec:
    cols = [dataclasses.replace(c, **change.get(c.name, {})) for c in spec.columns if c.name not in drop]
    return dataclasses.replace(
        spec, columns=tuple(cols) + columns, primary_key=key if key is not None else spec.primary_key
    )


@pytest.mark.parametrize(
    "sql,new,action,rebuild",
    [
        # nothing for the sinks: indexes, options, a DEFAULT for later rows, a column moved
        ("ALTER TABLE t ADD INDEX i (v)", T, NONE, False),
        ("ALTER TABLE t ENGINE=InnoDB", T, NONE, False),
        ("ALTER TABLE t ALTER COLUMN v SET DEFAULT 'x'", _with(T, v={"default": "x"}), NONE, False),
        ("ALTER TABLE t MODIFY v VARCHAR(20) AFTER d", _with(T, v={"position": 4}), RESNAPSHOT, False),
        # a nullable column without a default: existing rows read NULL in the source too
        ("ALTER TABLE t ADD COLUMN n INT", _with(T, ColumnSpec("n", "int", 4)), FOLLOW, False),
        # existing rows got a value without a row event
        (
            "ALTER TABLE t ADD COLUMN must INT NOT NULL",
            _with(T, ColumnSpec("must", "int", 4, nullable=False)),
            RESNAPSHOT,
            False,
        ),
        (
            "ALTER TABLE t ADD COLUMN e INT DEFAULT 7",
            _with(T, ColumnSpec("e", "int", 4, default="7")),
            RESNAPSHOT,
            False,
        ),
        (
            "ALTER TABLE t ADD COLUMN g INT AS (id + 1) VIRTUAL",
            _with(T, ColumnSpec("g", "int", 4, generated=True)),
            RESNAPSHOT,
            False,
        ),
        ("ALTER TABLE t MODIFY d DECIMAL(10,0)", _with(T, d={"scale": 0}), RESNAPSHOT, False),
        ("ALTER TABLE t MODIFY v VARCHAR(5)", _with(T, v={"length": 5}), RESNAPSHOT, False),
        (
            "ALTER TABLE t MODIFY d VARCHAR(20)",
            _with(T, d={"type_name": "varchar", "length": 20, "scale": None}),
            RESNAPSHOT,
            False,
        ),
        ("ALTER TABLE t CONVERT TO CHARACTER SET latin1", _with(T, v={"charset": "latin1"}), RESNAPSHOT, False),
        # the definition lags behind (a later DDL changed it back): the clause still counts
        ("ALTER TABLE t MODIFY d DECIMAL(10,0)", T, RESNAPSHOT, False),
        ("ALTER TABLE t ADD COLUMN e INT DEFAULT 5", _with(T, ColumnSpec("e", "int", 4)), RESNAPSHOT, False),
        # a column the source no longer has, or another key: the sink tables are rebuilt
        ("ALTER TABLE t DROP COLUMN d", _with(T, drop=("d",)), RESNAPSHOT, True),
        (
            "ALTER TABLE t RENAME COLUMN v TO w",
            _with(T, ColumnSpec("w", "varchar", 2, length=20), drop=("v",)),
            RESNAPSHOT,
            True,
        ),
        ("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)", _with(T, key=("id", "v")), RESNAPSHOT, True),
        # rows went away without row events
        ("ALTER TABLE t TRUNCATE PARTITION p0", T, RESET, False),
        ("ALTER TABLE t DROP PARTITION p0", T, RESET, False),
        ("ALTER IGNORE TABLE t ADD UNIQUE (v)", T, RESET, False),
        ("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE u", T, RESET, False),
    ],
)
def test_alter_decisions(sql, new, action, rebuild):
    d = decide("ALTER", T, new, sql)
    assert (d.action, d.rebuild) == (action, rebuild), str(d)
    assert d.snapshots == (action in (RESNAPSHOT, RESET) or rebuild)


def test_decisions_of_drop_create_rename():
    assert decide("DROP", T, None, "DROP TABLE t").action == DROP
    assert decide("ALTER", T, None, "ALTER TABLE t ADD x INT").action == DROP  # gone again when ingest looked
    # a table (re-)created or renamed to the name: emptied, snapshotted again
    same = decide("CREATE", T, T, "CREATE TABLE t (...)")
    assert (same.action, same.rebuild) == (RESET, False)
    other = decide("RENAME", T, _with(T, ColumnSpec("x", "int", 9), drop=("v",)), "RENAME TABLE u TO t")
    assert (other.action, other.rebuild) == (RESET, True)
    assert decide("CREATE", None, T).action == RESET


def test_without_statement_the_definitions_decide():
    assert decide("ALTER", T, T).action == NONE
    assert decide("ALTER", T, _with(T, ColumnSpec("n", "int", 4))).action == FOLLOW
    assert decide("ALTER", T, _with(T, ColumnSpec("n", "int", 4, default="1"))).action == RESNAPSHOT


def test_diff_ignores_what_does_not_change_stored_values():
    new = _with(T, v={"position": 7, "comment": "c", "default": "z", "collation": "utf8mb4_bin"})
    assert diff_specs(T, new) == diff_specs(T, T)


def test_lenient_decode_nulls_values_that_no_longer_fit_and_drops_keys_that_do_not():
    spec = TableSpec(
        "db",
        "t",
        (ColumnSpec("id", "int", 1, nullable=False), ColumnSpec("v", "int", 2), ColumnSpec("s", "smallint", 3)),
        ("id",),
    )
    schema = arrow_schema(spec)
    rows = [{"id": 1, "v": "abc", "s": 5}, {"id": "x", "v": 2}, {"id": 3, "v": 4, "s": 10**6}, None]
    table, kept = rows_to_arrow_lenient(schema, json_converters(spec, SourceModes()), rows, ["id"])
    assert kept == [0, 2]
    assert table.to_pylist() == [{"id": 1, "v": None, "s": 5}, {"id": 3, "v": 4, "s": None}]


def test_a_read_that_met_a_changed_table_is_told_apart_from_real_errors():
    import pymysql

    from merger.snapshot.runner import _changed_line, table_changed

    assert table_changed(pymysql.err.OperationalError(1054, "Unknown column 'v' in 'field list'"))
    assert table_changed(pymysql.err.ProgrammingError(1146, "Table 'db.t' doesn't exist"))
    spark = RuntimeError(
        "An exception was thrown from the Python worker:\n  File x\n"
        "RuntimeError: cdc-source-error: Unknown column 'v' in 'SELECT'"
    )
    assert table_changed(spark) and _changed_line(spark).startswith("RuntimeError: cdc-source-error: Unknown")
    assert not table_changed(pymysql.err.OperationalError(1045, "Access denied for user 'cdc'"))
    # a widened column read with the merger's older type (the ALTER has not reached it yet)
    import decimal

    import pyarrow as pa
    import pyarrow.compute as pc

    for value, narrower in [
        (decimal.Decimal("12345678901.23"), pa.decimal128(10, 2)),
        (decimal.Decimal("1.234"), pa.decimal128(10, 2)),
        (3_000_000_000, pa.int32()),
        (300, pa.uint8()),
    ]:
        with pytest.raises(pa.ArrowInvalid) as caught:
            pc.cast(pa.array([value]), narrower)
        assert table_changed(caught.value), caught.value
    assert not table_changed(pa.ArrowInvalid("Failed to parse string: 'x' as a scalar of type int32"))


def test_an_integer_display_width_is_no_change():
    """information_schema shows int(11) where Debezium's tableChanges show INT."""
    wide = _with(T, id={"length": 11})
    assert decide("ALTER", wide, T).action == NONE
    assert decide("ALTER", T, _with(T, v={"length": 21})).action == RESNAPSHOT
