"""ingest refines a table map with information_schema, which shows the table as it is now;
rows written before a later ALTER (read after it) must keep the types of their own version.
Found by the differential fuzzer (tests/integration/test_fuzz.py, Debezium comparison without waiting
before each DDL): DECIMAL(8,3) rows carried precision 14, DATETIME(3) values were written
as microseconds (MicroTimestamp), INT as int64."""

from __future__ import annotations

from ingest.columncodec import column_codec
from ingest.tablemap import table_spec_from_binlog
from tests.unit.test_types import _Col, _Opt, _TableMap


def _spec(info_rows):
    cols = [
        _Col(name="id", type=3),  # INT
        _Col(name="x", type=246, precision=8, decimals=3),  # DECIMAL(8,3)
        _Col(name="y", type=18, fsp=3),  # DATETIME(3)
        _Col(name="z", type=3),  # INT
        _Col(name="u", type=8, unsigned=True),  # BIGINT UNSIGNED
        _Col(name="s", type=15, max_length=80, collation_name="utf8mb4_general_ci"),
        _Col(name="w", type=3),  # INT, dropped since
    ]
    tm = _TableMap("db", "t", cols, bytes([0b11111110]), _Opt(simple_primary_key_list=[0]))
    return table_spec_from_binlog(tm, info_rows)


def _row(name, ctype, default=None, pos=1):
    return {
        "COLUMN_NAME": name,
        "COLUMN_TYPE": ctype,
        "COLUMN_DEFAULT": default,
        "IS_NULLABLE": "YES",
        "ORDINAL_POSITION": pos,
    }


def test_information_schema_of_the_same_version_refines():
    spec = _spec(
        [
            _row("x", "decimal(8,3)", "1.500"),
            _row("y", "datetime(3)", "'2020-01-01 00:00:00.000'"),
            _row("z", "int(11)", "7"),
            _row("u", "bigint(20) unsigned", "5"),
            _row("s", "varchar(20)", "'q'"),
        ]
    )
    assert spec.column("x").default == "1.500" and spec.column("z").default == "7"
    assert spec.column("u").default == "5" and spec.column("s").default == "q"
    assert spec.column("y").default is not None


def test_a_later_version_does_not_change_the_rows_types():
    # ALTER TABLE t MODIFY x DECIMAL(14,3), MODIFY y DATETIME(6), MODIFY z BIGINT,
    #   MODIFY u BIGINT (signed), DROP COLUMN w   -- before ingest read the rows
    spec = _spec(
        [
            _row("x", "decimal(14,3)", "1.500"),
            _row("y", "datetime(6)"),
            _row("z", "bigint(20)", "7"),
            _row("u", "bigint(20)"),
            _row("s", "varchar(20)", "'q'"),
        ]
    )
    x, y, z, u = (spec.column(n) for n in "xyzu")
    assert (x.length, x.scale) == (8, 3) and x.default is None
    assert column_codec(x).schema["parameters"]["connect.decimal.precision"] == "8"
    assert y.fsp == 3 and column_codec(y).schema["name"] == "io.debezium.time.Timestamp"
    assert z.type_name == "int" and column_codec(z).schema["type"] == "int32" and z.default is None
    assert u.unsigned
    assert spec.column("s").default == "q"  # unchanged columns are still refined
    assert spec.column("w").default is None


def test_a_column_dropped_and_added_again_with_another_type():
    spec = _spec([_row("z", "varchar(10)", "'a'"), _row("s", "int(11)", "3")])
    assert spec.column("z").type_name == "int" and spec.column("z").default is None
    assert spec.column("s").type_name == "varchar" and spec.column("s").default is None


def test_string_defaults_are_unescaped_as_mariadb_quotes_them():
    """Found by the Debezium comparison (seed 13): a DEFAULT with a line feed. MariaDB's
    information_schema writes NUL, LF, CR and backslash escaped and a quote doubled; tab
    and other characters as they are (read from MariaDB 10.11)."""
    from cdc.infoschema import info_default

    raw = "'a\\nb\\rc\td\\\\e''f\x1ag\x01h\\\\nI\\0'"
    assert info_default(raw) == "a\nb\rc\td\\e'f\x1ag\x01h\\nI\0"
    assert info_default("'it''s'") == "it's" and info_default("NULL") is None
    assert info_default("42") == "42" and info_default("current_timestamp()") == "current_timestamp()"
