"""The binlog model of history tables (tests/binlog_history.py): reading mariadb-binlog's
text, and the change-log and SCD type 2 models, on hand-made cases."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from tests import binlog_history as bh

TEXT = """\
use `other`/*!*/;
TRUNCATE TABLE `t`
/*!*/;
#261128  7:56:55 server id 1  end_log_pos 113438 CRC32 0x579dcfcc 	Table_map: `db`.`t` mapped to number 23
# Columns(`id` BIGINT UNSIGNED NOT NULL,
#         `d` DECIMAL(10,2),
#         `s` VARCHAR(40) CHARSET utf8mb4 COLLATE utf8mb4_general_ci,
#         `dt` DATETIME(6),
#         `i` INT)
# Primary Key(id)
# at 113438
#261128  7:56:55 server id 1  end_log_pos 113522 CRC32 0x36f50fba 	Write_rows: table id 23 flags: STMT_END_F
### INSERT INTO `db`.`t`
### SET
###   @1=-9223372036854775806 (9223372036854775810) /* LONGINT meta=0 nullable=0 is_null=0 */
###   @2=-99999999.99 /* DECIMAL(10,2) meta=2562 nullable=1 is_null=0 */
###   @3='a'b\\x09c /* d' /* VARSTRING(160) meta=160 nullable=1 is_null=0 */
###   @4='3329-10-03 20:03:42.000100' /* DATETIME(6) meta=6 nullable=1 is_null=0 */
###   @5=-232479430 (4062487866) /* INT meta=0 nullable=1 is_null=0 */
### UPDATE `db`.`t`
### WHERE
###   @1=5 /* LONGINT meta=0 nullable=0 is_null=0 */
###   @2=NULL /* DECIMAL(10,2) meta=2562 nullable=1 is_null=1 */
###   @3='x' /* VARSTRING(160) meta=160 nullable=1 is_null=0 */
###   @4=NULL /* DATETIME(6) meta=6 nullable=1 is_null=1 */
###   @5=1 /* INT meta=0 nullable=1 is_null=0 */
### SET
###   @1=6 /* LONGINT meta=0 nullable=0 is_null=0 */
###   @2=NULL /* DECIMAL(10,2) meta=2562 nullable=1 is_null=1 */
###   @3='y' /* VARSTRING(160) meta=160 nullable=1 is_null=0 */
###   @4=NULL /* DATETIME(6) meta=6 nullable=1 is_null=1 */
###   @5=1 /* INT meta=0 nullable=1 is_null=0 */
### UPDATE `other`.`t`
### WHERE
###   @1=5 /* LONGINT meta=0 nullable=0 is_null=0 */
### SET
###   @1=6 /* LONGINT meta=0 nullable=0 is_null=0 */
# Number of rows: 1
# at 113522
use `db`/*!*/;
TRUNCATE TABLE `t`
/*!*/;
#261128  7:56:55 server id 1  end_log_pos 113438 CRC32 0x579dcfcc 	Table_map: `db`.`t` mapped to number 24
# Columns(`id` BIGINT UNSIGNED NOT NULL,
#         `x` INT)
# Primary Key(id)
### DELETE FROM `db`.`t`
### WHERE
###   @1=7 /* LONGINT meta=0 nullable=0 is_null=0 */
###   @2=NULL /* INT meta=0 nullable=1 is_null=1 */
# at 113600
"""


def test_reads_row_events_key_changes_truncates_and_maps_of_one_database():
    changes = bh.BinlogText("db").feed(TEXT.splitlines())
    first = {
        "id": Decimal(9223372036854775810),
        "d": Decimal("-99999999.99"),
        "s": "a'b\\x09c /* d",
        "dt": datetime(3329, 10, 3, 20, 3, 42, 100),
        "i": Decimal(-232479430),  # signed: the unsigned reading is not taken
    }
    assert changes == [
        bh.RowChange("c", "t", (Decimal(9223372036854775810),), first),
        bh.RowChange("d", "t", (Decimal(5),), None, {"id": 5, "d": None, "s": "x", "dt": None, "i": 1}),
        bh.RowChange("c", "t", (Decimal(6),), {"id": 6, "d": None, "s": "y", "dt": None, "i": 1}),
        bh.RowChange("t", "t", None, None),
        bh.RowChange("d", "t", (Decimal(7),), None, {"id": 7, "x": None}),  # the second map's columns
    ]


def test_canonical_values_of_every_client_meet_the_binlogs():
    assert bh.canon("a\tb\x01é'") == "a\\x09b\\x01é'" == bh.binlog_value("'a\\x09b\\x01é''", "VARCHAR(4)")
    assert bh.canon(5) == bh.canon(Decimal("5.00")) == bh.binlog_value("5", "INT")
    assert bh.canon(2**64 - 1) == bh.binlog_value("-1 (18446744073709551615)", "BIGINT UNSIGNED NOT NULL")
    utc = datetime(2024, 1, 1, 12, tzinfo=timezone.utc)
    plus2 = utc.astimezone(timezone(timedelta(hours=2)))
    assert bh.canon(plus2) == bh.canon(datetime(2024, 1, 1, 12)) == bh.binlog_value("'2024-01-01 12:00:00'", "DATETIME")
    assert bh.canon(None) is None and bh.binlog_value("NULL", "INT") is None


def _c(op, k, **values):
    return bh.RowChange(
        op, "t", (Decimal(k),) if k is not None else None, {"id": Decimal(k), **values} if values else None
    )


def _values(k, v=None):
    return {"id": Decimal(k), "v": v}


CHANGES = [_c("u", 1, v="b"), _c("c", 3, v="x"), _c("d", 2), _c("t", None), _c("c", 1, v="c")]
INITIAL = {(Decimal(1),): _values(1, "a"), (Decimal(2),): _values(2, "a"), (Decimal(4),): _values(4, "q")}
COLUMNS = ["id", "v"]


def _log(*snapshots_at):
    """The change log of CHANGES, with snapshot rows (key, values) inserted before change i."""
    rows = [(c.op, c.key, bh.logged_values(c, COLUMNS, ["id"])) for c in CHANGES]
    for i, key, values in sorted(snapshots_at, key=lambda s: -s[0]):
        rows.insert(i, ("r", key, values))
    return rows


def test_a_change_log_with_each_change_once_and_snapshot_rows_at_their_place_is_exact():
    k1, k4 = (Decimal(1),), (Decimal(4),)
    log = _log((0, k1, _values(1, "a")), (0, (Decimal(2),), _values(2, "a")), (2, k4, _values(4, "q")))
    assert bh.changelog_faults(CHANGES, INITIAL, log, COLUMNS, ["id"]) == []
    # key 1 read after its update: its state then
    log = _log((1, k1, _values(1, "b")), (0, k4, _values(4, "q")))
    assert bh.changelog_faults(CHANGES, INITIAL, log, COLUMNS, ["id"]) == []


def test_a_change_log_missing_a_change_or_with_a_stale_snapshot_row_or_one_twice_is_not():
    k1, k4 = (Decimal(1),), (Decimal(4),)
    full = _log((0, k4, _values(4, "q")))
    assert bh.changelog_faults(CHANGES, INITIAL, full[:-1], COLUMNS, ["id"])  # a change missing
    swapped = full[:1] + [full[2], full[1]] + full[3:]
    assert bh.changelog_faults(CHANGES, INITIAL, swapped, COLUMNS, ["id"])  # out of order
    stale = _log((0, k4, _values(4, "q")), (1, k1, _values(1, "a")))  # key 1 read after its update, old value
    assert any("snapshot row of key" in f for f in bh.changelog_faults(CHANGES, INITIAL, stale, COLUMNS, ["id"]))
    twice = _log((0, k4, _values(4, "q")), (1, k4, _values(4, "q")))
    assert any("more snapshot rows" in f for f in bh.changelog_faults(CHANGES, INITIAL, twice, COLUMNS, ["id"]))
    missing = _log()  # key 4 existed until the truncate... and was never read
    assert bh.changelog_faults(CHANGES, INITIAL, missing, COLUMNS, ["id"]) == []
    untouched = {**INITIAL, (Decimal(9),): _values(9, "z")}
    no_changes_after = CHANGES[:3]
    rows = [(c.op, c.key, bh.logged_values(c, COLUMNS, ["id"])) for c in no_changes_after]
    assert any("no snapshot row" in f for f in bh.changelog_faults(no_changes_after, untouched, rows, COLUMNS, ["id"]))
    bad_delete = [("d", (Decimal(2),), {"id": Decimal(2), "v": "a"}) if r[0] == "d" else r for r in full]
    assert bh.changelog_faults(CHANGES, INITIAL, bad_delete, COLUMNS, ["id"])  # a delete keeps its key only


def test_versions_open_on_a_change_of_values_close_on_delete_and_truncate():
    changes = [*CHANGES, _c("u", 1, v="c"), _c("c", 5, v=None)]
    got = bh.versions(changes, INITIAL, COLUMNS)
    assert got == {
        (Decimal(1),): [(_values(1, "a"), False), (_values(1, "b"), False), (_values(1, "c"), True)],
        (Decimal(2),): [(_values(2, "a"), False)],
        (Decimal(3),): [(_values(3, "x"), False)],
        (Decimal(4),): [(_values(4, "q"), False)],
        (Decimal(5),): [(_values(5, None), True)],
    }
    assert bh.versions_faults(changes, INITIAL, got, COLUMNS) == []
    # key 1 snapshotted after its first change: its history starts there
    late = {**got, (Decimal(1),): got[(Decimal(1),)][1:]}
    assert bh.versions_faults(changes, INITIAL, late, COLUMNS) == []
    # but an untouched key must have its snapshot version, and versions must be right
    assert bh.versions_faults(changes, INITIAL, {k: v for k, v in got.items() if k != (Decimal(4),)}, COLUMNS)
    reopened = {**got, (Decimal(1),): [*got[(Decimal(1),)][:2], (_values(1, "b"), False), got[(Decimal(1),)][2]]}
    assert bh.versions_faults(changes, INITIAL, reopened, COLUMNS)
    never_closed = {**got, (Decimal(2),): [(_values(2, "a"), True)]}
    assert bh.versions_faults(changes, INITIAL, never_closed, COLUMNS)


# a DDL that gives existing rows a value (ADD COLUMN x DEFAULT 7) and the re-snapshot after it
DDL_CHANGES = [_c("u", 1, v="b"), bh.RowChange("ddl", "t", None, None), _c("u", 2, v="c", x=Decimal(7))]
DDL_INITIAL = {(Decimal(1),): _values(1, "a"), (Decimal(2),): _values(2, "a")}
CAPTURED = [  # the source right after the DDL
    {
        (Decimal(1),): {"id": Decimal(1), "v": "b", "x": Decimal(7)},
        (Decimal(2),): {"id": Decimal(2), "v": "a", "x": Decimal(7)},
    }
]
X_COLUMNS = ["id", "v", "x"]


def _x(k, v, x=None):
    return {"id": Decimal(k), "v": v, "x": x}


def test_a_resnapshot_after_a_ddl_adds_a_version_for_each_key_it_reads_unchanged():
    got = {
        (Decimal(1),): [(_x(1, "a"), False), (_x(1, "b"), False), (_x(1, "b", Decimal(7)), True)],
        (Decimal(2),): [(_x(2, "a"), False), (_x(2, "c", Decimal(7)), True)],
    }
    assert bh.versions_faults(DDL_CHANGES, DDL_INITIAL, got, X_COLUMNS, CAPTURED) == []
    # key 2 changed after the DDL: the re-snapshot may also have read it before the change
    also = {**got, (Decimal(2),): [(_x(2, "a"), False), (_x(2, "a", Decimal(7)), False), got[(Decimal(2),)][1]]}
    assert bh.versions_faults(DDL_CHANGES, DDL_INITIAL, also, X_COLUMNS, CAPTURED) == []
    # key 1 did not change after the DDL: the re-snapshot must have read it
    missed = {**got, (Decimal(1),): got[(Decimal(1),)][:2]}
    missed[(Decimal(1),)][-1] = (_x(1, "b"), True)
    assert bh.versions_faults(DDL_CHANGES, DDL_INITIAL, missed, X_COLUMNS, CAPTURED)


def test_a_change_log_takes_a_snapshot_row_per_key_after_each_ddl_at_the_captured_state():
    def row(c):
        return (c.op, c.key, bh.logged_values(c, X_COLUMNS, ["id"]))

    k1, k2 = (Decimal(1),), (Decimal(2),)
    rows = [
        ("r", k1, _x(1, "a")),
        ("r", k2, _x(2, "a")),
        row(DDL_CHANGES[0]),
        ("r", k1, _x(1, "b", Decimal(7))),  # the re-snapshot
        ("r", k2, _x(2, "a", Decimal(7))),
        row(DDL_CHANGES[2]),
    ]
    assert bh.changelog_faults(DDL_CHANGES, DDL_INITIAL, rows, X_COLUMNS, ["id"], CAPTURED) == []
    stale = rows[:4] + [("r", k2, _x(2, "a"))] + rows[5:]  # read without the new column's value
    assert bh.changelog_faults(DDL_CHANGES, DDL_INITIAL, stale, X_COLUMNS, ["id"], CAPTURED)
    twice = rows[:2] + [("r", k2, _x(2, "a"))] + rows[2:]  # two snapshot rows before the DDL
    assert any(
        "more snapshot rows" in f
        for f in bh.changelog_faults(DDL_CHANGES, DDL_INITIAL, twice, X_COLUMNS, ["id"], CAPTURED)
    )


def test_a_before_after_log_holds_an_updates_old_row_and_a_deletes_removed_row():
    changes = [
        bh.RowChange("u", "t", (Decimal(1),), _values(1, "b"), _values(1, "a")),
        bh.RowChange("d", "t", (Decimal(1),), None, _values(1, "b")),
        bh.RowChange("c", "t", (Decimal(2),), _values(2, "c")),
    ]
    rows = [(c.op, c.key, bh.logged_values(c, COLUMNS, ["id"])) for c in changes]
    nulls = {"id": None, "v": None}
    befores = [_values(1, "a"), _values(1, "b"), nulls]
    assert bh.changelog_faults(changes, {}, rows, COLUMNS, ["id"], befores=befores) == []
    assert bh.changelog_faults(changes, {}, rows, COLUMNS, ["id"], befores=[_values(1, "b"), *befores[1:]])
    assert bh.changelog_faults(changes, {}, rows, COLUMNS, ["id"], befores=[*befores[:2], _values(2, "c")])
    snap = [("r", (Decimal(3),), _values(3, "z")), *rows]
    initial = {(Decimal(3),): _values(3, "z")}
    assert bh.changelog_faults(changes, initial, snap, COLUMNS, ["id"], befores=[nulls, *befores]) == []
    assert bh.changelog_faults(changes, initial, snap, COLUMNS, ["id"], befores=[_values(3, "z"), *befores])


def test_a_resnapshot_planned_late_may_read_a_key_after_later_ddls_and_its_change():
    ddl = bh.RowChange("ddl", "t", None, None)
    changes = [ddl, ddl, _c("u", 1, v="c", x=Decimal(7))]
    after = {(Decimal(1),): {"id": Decimal(1), "v": "a", "x": Decimal(7)}}
    got = {(Decimal(1),): [(_x(1, "a"), False), (_x(1, "c", Decimal(7)), True)]}
    assert bh.versions_faults(changes, {(Decimal(1),): _values(1, "a")}, got, X_COLUMNS, [after, after]) == []
    # without the change, the last re-snapshot must have read it
    untouched = {(Decimal(1),): [(_x(1, "a"), True)]}
    assert bh.versions_faults(changes[:2], {(Decimal(1),): _values(1, "a")}, untouched, X_COLUMNS, [after, after])


def test_ddl_places_of_the_database_whether_named_by_use_or_qualified():
    text = [
        "use `other`/*!*/;",
        "TRUNCATE TABLE `db`.`t`",
        "TRUNCATE TABLE t",
        "ALTER TABLE db.t ADD COLUMN x INT",
        "CREATE INDEX `ix` ON `t` (`i`)",
        "use `db`/*!*/;",
        "TRUNCATE `t`",
        "CREATE INDEX `ix` ON `t` (`i`)",
        "ALTER TABLE `other`.`t` DROP COLUMN x",
        "ALTER TABLE `u` DROP COLUMN x",
    ]
    assert [(c.op, c.table) for c in bh.BinlogText("db").feed(text)] == [
        ("t", "t"),
        ("ddl", "t"),
        ("t", "t"),
        ("ddl", "t"),
        ("ddl", "u"),
    ]
