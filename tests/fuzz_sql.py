"""Seeded random SQL workloads for the differential fuzzer (tests/integration/test_fuzz.py).

``Workload(seed)`` always gives the same SQL for the same seed: ``setup()`` creates the
tables of one database and fills them a little (so that a merger started afterwards has
something to snapshot), ``statements(n)`` yields ``n`` random statements, ``finish()``
closes a transaction left open. Each yielded string is one statement; literals are
written into the text, so a printed statement list is a complete reproduction.

Tables (InnoDB unless said otherwise), chosen for key collisions:

* ``t_int``   ``id INT`` key, small key space plus the INT extremes;
* ``t_ubig``  ``id BIGINT UNSIGNED`` key around 0, 2^63 and 2^64 - 1;
* ``t_str``   ``code VARCHAR(24)`` key in ``utf8mb4_general_ci``: 'a' = 'A' = 'á', 'a ' = 'a'
  (PAD SPACE), every emoji equal to every other;
* ``t_comp``  ``(a INT, b VARCHAR(16) utf8mb4_unicode_ci)`` key: 'ß' = 'ss';
* ``t_myi``   (``myisam=True``) a MyISAM table with an INT key: its changes inside a
  transaction are not rolled back, and MariaDB then writes ROLLBACK TO into the binlog.

Value columns: INT, DECIMAL(10,2), VARCHAR(40) with unicode and emoji, DATETIME(6), TEXT,
NULLs; columns added by DDL later. Statements: single and multi-row INSERT, INSERT IGNORE,
INSERT ... ON DUPLICATE KEY UPDATE, REPLACE, UPDATE and DELETE by key and by range (ORDER
BY ... LIMIT), primary-key changes (also to a collation-equal key: 'a' -> 'A'), multi-table
UPDATE and DELETE, INSERT ... SELECT, BEGIN/COMMIT/ROLLBACK, nested SAVEPOINT / ROLLBACK
TO / RELEASE, and DDL: ADD COLUMN (with or without DEFAULT, FIRST/AFTER), DROP COLUMN,
MODIFY widening (INT -> BIGINT, DECIMAL(p,s) -> DECIMAL(p+k,s), VARCHAR(n) -> VARCHAR(2n),
DATETIME(3) -> DATETIME(6)), ADD/DROP INDEX, TRUNCATE, sometimes inside a transaction
(an implicit commit).

The generator models the schema and the transaction (open or not, savepoints), never the
rows: statements may fail (duplicate key, unknown savepoint, value out of range) and the
runner goes on, as MariaDB lets a transaction go on after a failed statement. Errors the
model should rule out (unknown column, syntax) are raised: they mean a generator bug.
Pure except ``execute``, which takes a DB-API cursor.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Iterator

# ----------------------------------------------------------------------------- values

# key strings that collide under utf8mb4_general_ci (t_str) or utf8mb4_unicode_ci (t_comp)
KEY_STRINGS = [
    "a",
    "A",
    "á",
    "Ä",
    "a ",
    "b",
    "B",
    "ss",
    "ß",
    "SS",
    "straße",
    "STRASSE",
    "e",
    "É",
    "ê",
    "😀",
    "😁",
    "🎉x",
    "日本",
    "ｶ",
    "カ",
    "O'Brien",
    "o'brien",
    "back\\slash",
    "tab\tx",
    "z",
    "Z",
    "-",
    "",
    " ",
    "Ω",
    "ω",
    "ǅ",
    "ǆ",
]
TEXT_PIECES = [
    "a",
    "Z",
    "é",
    "ß",
    "日本語",
    "😀",
    "🎉",
    "👍🏽",
    "e\u0301",
    "שלום",
    "'",
    '"',
    "\\",
    "\n",
    "\t",
    " ",
    "%",
    "_",
    "\u200d",
    "€",
    "x",
    "0",
    "\x01",
    "ｶ",
    "Ω",
]


def sql_str(s: str) -> str:
    """A string literal safe in any sql_mode (no NO_BACKSLASH_ESCAPES assumptions broken:
    backslash and quote are escaped the way MariaDB reads them by default)."""
    return "'" + s.replace("\\", "\\\\").replace("'", "''").replace("\x00", "\\0") + "'"


@dataclass
class Col:
    name: str
    kind: str  # int | bigint | ubig | decimal | varchar | datetime | text
    length: int = 0  # VARCHAR length, DECIMAL precision
    scale: int = 0  # DECIMAL scale, DATETIME fsp
    nullable: bool = True
    default: str | None = None  # an SQL literal
    collation: str | None = None

    def type_sql(self) -> str:
        t = {"int": "INT", "bigint": "BIGINT", "ubig": "BIGINT UNSIGNED", "text": "TEXT"}.get(self.kind)
        if t is None:
            t = {
                "decimal": f"DECIMAL({self.length},{self.scale})",
                "varchar": f"VARCHAR({self.length})",
                "datetime": f"DATETIME({self.scale})",
            }[self.kind]
        if self.collation:
            t += f" CHARACTER SET utf8mb4 COLLATE {self.collation}"
        return t

    def sql(self) -> str:
        out = f"`{self.name}` {self.type_sql()}"
        out += "" if self.nullable else " NOT NULL"
        if self.default is not None:
            out += f" DEFAULT {self.default}"
        return out

    def widened(self) -> "Col | None":
        if self.kind == "int":
            return replace(self, kind="bigint")
        if self.kind == "decimal" and self.length < 60:
            return replace(self, length=self.length + 3)
        if self.kind == "varchar" and self.length < 400:
            return replace(self, length=self.length * 2)
        if self.kind == "datetime" and self.scale < 6:
            return replace(self, scale=6)
        return None


@dataclass
class Table:
    name: str
    keys: list[Col]
    values: list[Col]
    engine: str = "InnoDB"
    indexes: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[Col]:
        return self.keys + self.values

    def col(self, name: str) -> Col:
        return next(c for c in self.columns if c.name == name)

    def create_sql(self) -> str:
        cols = ",\n  ".join(c.sql() for c in self.columns)
        pk = ", ".join(f"`{c.name}`" for c in self.keys)
        return (
            f"CREATE TABLE `{self.name}` (\n  {cols},\n  PRIMARY KEY ({pk})\n) ENGINE={self.engine} "
            f"DEFAULT CHARSET=utf8mb4"
        )


BASE_VALUES = ("i", "d", "s", "dt", "tx")
BULK_ROWS = 300
BULK_BASE = 1000  # cold numeric keys: BULK_BASE + 1 .. BULK_BASE + BULK_ROWS


def _bulk_key(c: "Col") -> str:
    """The SQL expression (of MariaDB's sequence table's ``seq``) of a cold key."""
    if c.name == "a":
        return "seq % 6"
    if c.kind == "varchar":
        return "CONCAT(IF(seq % 2, 'k', 'K'), seq)"
    return f"{BULK_BASE} + seq"


def _bulk_key_value(c: "Col", r: random.Random) -> str:
    n = r.randint(1, BULK_ROWS)
    if c.kind == "varchar":
        return sql_str(r.choice("kK") + str(n))  # either case: the same key
    return str(BULK_BASE + n)  # never dropped: multi-table statements use them


def _base_values(extra: list[Col] | None = None) -> list[Col]:
    return [
        Col("i", "int"),
        Col("d", "decimal", 10, 2),
        Col("s", "varchar", 40),
        Col("dt", "datetime", 0, 6),
        Col("tx", "text"),
        *(extra or []),
    ]


def initial_tables(myisam: bool = False) -> list[Table]:
    tables = [
        Table(
            "t_int", [Col("id", "int", nullable=False)], _base_values([Col("n", "int", nullable=False, default="0")])
        ),
        Table("t_ubig", [Col("id", "ubig", nullable=False)], _base_values()),
        Table("t_str", [Col("code", "varchar", 24, nullable=False, collation="utf8mb4_general_ci")], _base_values()),
        Table(
            "t_comp",
            [Col("a", "int", nullable=False), Col("b", "varchar", 16, nullable=False, collation="utf8mb4_unicode_ci")],
            _base_values(),
        ),
    ]
    if myisam:
        tables.append(Table("t_myi", [Col("id", "int", nullable=False)], _base_values(), engine="MyISAM"))
    return tables


# ----------------------------------------------------------------------------- the generator


@dataclass
class Features:
    """What the generator may emit. The defaults are the forms the pipeline is expected to
    get right; the others are switched on to look for (or show) known gaps."""

    ddl: bool = True
    myisam: bool = False  # add t_myi (MyISAM) and use it inside transactions
    reuse_dropped_names: bool = False  # ADD COLUMN may reuse a dropped column's name
    key_widening: bool = True  # MODIFY a key column INT -> BIGINT
    ddl_in_transaction: bool = True  # DDL inside BEGIN ... (an implicit commit)
    # ADD COLUMN ... NOT NULL without DEFAULT: existing rows get the type's implicit
    # default (0, '') without any row event
    implicit_default: bool = False


class Workload:
    def __init__(self, seed: int, features: Features | None = None) -> None:
        self.seed = seed
        self.features = features or Features()
        self.r = random.Random(seed)
        self.tables = initial_tables(self.features.myisam)
        self.in_tx = False
        self.savepoints: list[str] = []
        self._col_counter = 0
        self._idx_counter = 0
        self.dropped: list[Col] = []

    # ------------------------------------------------------------------ public

    def setup(self, rows_per_table: int = 40, bulk_rows: int = BULK_ROWS) -> list[str]:
        """CREATE TABLE statements and initial rows (run in the target database): random
        rows in the hot key range, and ``bulk_rows`` rows in a cold range next to it (so a
        snapshot has several chunks; statements reach it now and then)."""
        out = [t.create_sql() for t in self.tables]
        for t in self.tables:
            for _ in range(max(1, rows_per_table // 5)):
                out.append(self._insert(t, rows=5, verb="INSERT IGNORE"))
            if bulk_rows:
                keys = ", ".join(_bulk_key(c) for c in t.keys)
                names = ", ".join(f"`{c.name}`" for c in t.keys)
                out.append(
                    f"INSERT IGNORE INTO `{t.name}` ({names}, `i`, `s`, `dt`) SELECT {keys}, seq, "
                    f"CONCAT('bulk ', seq), '2024-01-01 00:00:00' + INTERVAL seq SECOND "
                    f"FROM seq_1_to_{bulk_rows}"
                )
        return out

    def statements(self, n: int) -> Iterator[str]:
        for _ in range(n):
            yield self.next_statement()

    def finish(self) -> list[str]:
        """Ends an open transaction (COMMIT)."""
        if self.in_tx:
            self.in_tx, self.savepoints = False, []
            return ["COMMIT"]
        return []

    def next_statement(self) -> str:
        r = self.r
        x = r.random()
        if self.in_tx:
            if x < 0.05:
                return self._end_tx("COMMIT")
            if x < 0.07:
                return self._end_tx("ROLLBACK")
            if x < 0.11:
                return self._savepoint()
            if x < 0.14 and self.savepoints:
                return self._rollback_to()
            if x < 0.155 and self.savepoints:
                return self._release()
            if x < 0.157:
                return f"ROLLBACK TO SAVEPOINT nosuch{r.randint(0, 3)}"  # fails: 1305
        elif x < 0.06:
            self.in_tx, self.savepoints = True, []
            return r.choice(["BEGIN", "START TRANSACTION", "BEGIN"])
        elif x < 0.065:
            return f"SAVEPOINT sp{r.randint(0, 3)}"  # outside a transaction: accepted, no effect
        if self.features.ddl and r.random() < 0.025 and (not self.in_tx or self.features.ddl_in_transaction):
            return self._ddl()
        return self._dml()

    # ------------------------------------------------------------------ transactions

    def _end_tx(self, verb: str) -> str:
        self.in_tx, self.savepoints = False, []
        return verb

    def _savepoint(self) -> str:
        name = f"sp{self.r.randint(0, 3)}"
        if name in self.savepoints:  # set again: it moves to the end
            self.savepoints.remove(name)
        self.savepoints.append(name)
        return self.r.choice(["SAVEPOINT {}", "SAVEPOINT `{}`"]).format(name)

    def _rollback_to(self) -> str:
        name = self.r.choice(self.savepoints)
        self.savepoints = self.savepoints[: self.savepoints.index(name) + 1]
        return self.r.choice(["ROLLBACK TO SAVEPOINT {}", "ROLLBACK TO {}", "ROLLBACK WORK TO SAVEPOINT {}"]).format(
            name
        )

    def _release(self) -> str:
        name = self.r.choice(self.savepoints)
        self.savepoints = self.savepoints[: self.savepoints.index(name)]
        return f"RELEASE SAVEPOINT {name}"

    # ------------------------------------------------------------------ values

    def value(self, c: Col, null_ok: bool = True) -> str:
        r = self.r
        if null_ok and c.nullable and r.random() < 0.12:
            return "NULL"
        k = c.kind
        if k in ("int", "bigint"):
            y = r.random()
            if y < 0.7:
                return str(r.randint(-1000, 1000))
            if y < 0.9:
                return str(r.randint(-(2**31), 2**31 - 1))
            if k == "bigint":
                return str(r.randint(-(2**63), 2**63 - 1))
            return str(r.choice([-(2**31), 2**31 - 1, 0, -1]))
        if k == "ubig":
            return str(r.choice([r.randint(0, 2**64 - 1), r.randint(0, 1000), 2**64 - 1, 2**63]))
        if k == "decimal":
            digits = c.length - c.scale
            y = r.random()
            if y < 0.1:
                top = 10**c.length - 1
                n = r.choice([top, -top, 0, 1, -1])
            elif y < 0.5:
                n = r.randint(-(10**c.length) + 1, 10**c.length - 1)
            else:
                n = r.randint(-(10 ** min(digits, 4)) * 10**c.scale, 10 ** min(digits, 4) * 10**c.scale)
            return str(Decimal(n).scaleb(-c.scale)) if c.scale else str(n)
        if k == "varchar":
            return sql_str(self.text(r.randint(0, c.length)))
        if k == "text":
            y = r.random()
            if y < 0.8:
                return sql_str(self.text(r.randint(0, 60)))
            return sql_str(self.text(r.randint(1, 20)) * r.randint(10, 300))
        if k == "datetime":
            y = r.random()
            if y < 0.1:
                return sql_str(
                    r.choice(
                        [
                            "1000-01-01 00:00:00",
                            "9999-12-31 23:59:59.999999",
                            "1970-01-01 00:00:00",
                            "1969-12-31 23:59:59.999999",
                            "2038-01-19 03:14:08",
                        ]
                    )
                )
            year = r.choice([r.randint(1000, 9999), r.randint(1960, 2040)])
            frac = f".{r.randint(0, 999999):06d}" if r.random() < 0.7 else ""
            return sql_str(
                f"{year:04d}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} "
                f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}{frac}"
            )
        raise AssertionError(k)

    def text(self, n: int) -> str:
        r = self.r
        if r.random() < 0.5:
            return "".join(
                r.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ") for _ in range(n)
            )
        out = []
        while len(out) < n:
            out.append(r.choice(TEXT_PIECES))
        return "".join(out)[:n] if r.random() < 0.97 else "".join(out)  # sometimes too long

    def key_value(self, c: Col) -> str:
        r = self.r
        if c.name == "a":  # t_comp's first key column: few values
            return str(r.randint(0, 5))
        if r.random() < 0.08:
            return _bulk_key_value(c, r)
        if c.kind in ("int", "bigint"):
            y = r.random()
            if y < 0.9:
                return str(r.randint(-3, 60))
            return str(r.choice([-(2**31), 2**31 - 1, 2**31 - 2]))
        if c.kind == "ubig":
            return str(r.choice([r.randint(0, 40), 2**63 + r.randint(-3, 3), 2**64 - 1 - r.randint(0, 5)]))
        if c.kind == "varchar":
            if r.random() < 0.85:
                return sql_str(r.choice(KEY_STRINGS))
            return sql_str(r.choice(KEY_STRINGS) + r.choice(KEY_STRINGS))
        raise AssertionError(c.kind)

    def key_where(self, t: Table) -> str:
        return " AND ".join(f"`{c.name}` = {self.key_value(c)}" for c in t.keys)

    def key_range(self, t: Table) -> str:
        """A short range of the first key column (a few rows of the hot or the cold keys)."""
        r = self.r
        c = t.keys[0]
        if c.kind == "varchar":
            if r.random() < 0.1:
                n = r.randint(1, BULK_ROWS)
                return f"`{c.name}` BETWEEN {sql_str(r.choice('kK') + str(n))} AND {sql_str('k' + str(n + 9))}"
            a, b = self.key_value(c), self.key_value(c)
        else:
            a = int(self.key_value(c))
            b = a + r.choice([0, 1, 3, 8, 20])
            if c.kind == "ubig" and b > 2**64 - 1:
                a, b = a - 20, a
        return f"`{c.name}` BETWEEN {a} AND {b}"

    # ------------------------------------------------------------------ DML

    def _table(self) -> Table:
        return self.r.choice(self.tables)

    def _value_cols(self, t: Table, at_least: int = 0) -> list[Col]:
        cols = [c for c in t.values if self.r.random() < 0.6]
        if len(cols) < at_least:
            cols = self.r.sample(t.values, min(at_least, len(t.values)))
        return cols

    def _row(self, t: Table, cols: list[Col]) -> str:
        return "(" + ", ".join(self.key_value(c) if c in t.keys else self.value(c) for c in cols) + ")"

    def _insert(self, t: Table, rows: int, verb: str = "INSERT", suffix: str = "") -> str:
        cols = t.keys + self._value_cols(t)
        names = ", ".join(f"`{c.name}`" for c in cols)
        values = ", ".join(self._row(t, cols) for _ in range(rows))
        return f"{verb} INTO `{t.name}` ({names}) VALUES {values}{suffix}"

    def _assignments(self, t: Table, alias: str = "") -> str:
        cols = self._value_cols(t, at_least=1)
        return ", ".join(f"{alias}`{c.name}` = {self._expr(c, alias)}" for c in cols)

    def _expr(self, c: Col, alias: str = "") -> str:
        r = self.r
        me = f"{alias}`{c.name}`"
        y = r.random()
        if y < 0.6:
            return self.value(c)
        if c.kind in ("int", "bigint", "ubig", "decimal"):
            return r.choice([f"{me} + 1", f"{me} - 1", f"COALESCE({me}, 0) + 7", f"{me} * 2", me])
        if c.kind in ("varchar", "text"):
            return r.choice(
                [
                    f"CONCAT({me}, 'x')",
                    f"UPPER({me})",
                    f"LEFT({me}, 3)",
                    f"REVERSE({me})",
                    f"CONCAT(COALESCE({me}, ''), '😀')",
                    me,
                ]
            )
        return r.choice([f"{me} + INTERVAL 1 SECOND", f"{me} - INTERVAL 1 DAY", me])

    def _dml(self) -> str:
        r = self.r
        t = self._table()
        kinds = [
            ("insert", 12),
            ("insert_multi", 8),
            ("insert_ignore", 5),
            ("upsert", 8),
            ("replace", 5),
            ("update_key", 14),
            ("update_range", 8),
            ("key_change", 7),
            ("delete_key", 7),
            ("delete_range", 4),
            ("multi_update", 3),
            ("multi_delete", 2),
            ("insert_select", 3),
        ]
        kind = r.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        key = ", ".join(f"`{c.name}`" for c in t.keys)
        if kind == "insert":
            return self._insert(t, 1)
        if kind == "insert_multi":
            return self._insert(t, r.randint(2, 6))
        if kind == "insert_ignore":
            return self._insert(t, r.randint(1, 6), verb="INSERT IGNORE")
        if kind == "upsert":
            upd = ", ".join(
                r.choice([f"`{c.name}` = VALUES(`{c.name}`)", f"`{c.name}` = {self._expr(c)}"])
                for c in self._value_cols(t, at_least=1)
            )
            return self._insert(t, r.randint(1, 4), suffix=f" ON DUPLICATE KEY UPDATE {upd}")
        if kind == "replace":
            return self._insert(t, r.randint(1, 4), verb="REPLACE")
        if kind == "update_key":
            return f"UPDATE `{t.name}` SET {self._assignments(t)} WHERE {self.key_where(t)}"
        if kind == "update_range":
            order = f" ORDER BY {key}{r.choice(['', ' DESC'])} LIMIT {r.randint(1, 6)}" if r.random() < 0.6 else ""
            return f"UPDATE `{t.name}` SET {self._assignments(t)} WHERE {self.key_range(t)}{order}"
        if kind == "key_change":
            return self._key_change(t)
        if kind == "delete_key":
            return f"DELETE FROM `{t.name}` WHERE {self.key_where(t)}"
        if kind == "delete_range":
            limit = f" ORDER BY {key} LIMIT {r.randint(1, 4)}" if r.random() < 0.7 else ""
            return f"DELETE FROM `{t.name}` WHERE {self.key_range(t)}{limit}"
        if kind == "multi_update":
            a, b = r.sample(self.tables, 2)
            return (
                f"UPDATE `{a.name}` x JOIN `{b.name}` y ON {self._join(a, b)} SET {self._assignments(a, 'x.')}"
                f"{', ' + self._assignments(b, 'y.') if r.random() < 0.6 else ''} "
                f"WHERE x.{self.key_range(a)}"
            )
        if kind == "multi_delete":
            a, b = r.sample(self.tables, 2)
            which = r.choice(["x", "y", "x, y"])
            return (
                f"DELETE {which} FROM `{a.name}` x JOIN `{b.name}` y ON {self._join(a, b)} WHERE x.{self.key_range(a)}"
            )
        if kind == "insert_select":
            return self._insert_select(t)
        raise AssertionError(kind)

    def _join(self, a: Table, b: Table) -> str:
        """A join condition between two tables' keys or values."""
        r = self.r
        ka, kb = a.keys[-1] if r.random() < 0.5 else a.keys[0], b.keys[0]
        numeric = ("int", "bigint", "ubig")
        if ka.kind in numeric and kb.kind in numeric or ka.collation is not None and ka.collation == kb.collation:
            return f"x.`{ka.name}` = y.`{kb.name}`"
        return r.choice(["x.`i` = y.`i`", "x.`s` = y.`s`", "x.`i` % 7 = y.`i` % 7"])

    def _insert_select(self, t: Table) -> str:
        r = self.r
        src = self._table()
        exprs = []
        for c in t.keys:
            if c.kind in ("int", "bigint"):
                e = r.choice(["y.`i` % 50", f"y.`i` % 7 + {r.randint(0, 40)}"])
                if src.keys[0].kind in ("int", "bigint", "ubig"):
                    e = r.choice([e, f"(y.`{src.keys[0].name}` + {r.randint(1, 5)}) % 60"])
                exprs.append(f"COALESCE({e}, 0)")
            elif c.kind == "ubig":
                exprs.append("ABS(COALESCE(y.`i`, 0)) % 40")
            else:
                exprs.append(
                    r.choice(
                        [
                            "UPPER(COALESCE(LEFT(y.`s`, 2), 'q'))",
                            "COALESCE(LEFT(y.`s`, 1), '')",
                            sql_str(r.choice(KEY_STRINGS)),
                        ]
                    )
                )
        cols = list(t.keys)
        for name in BASE_VALUES:
            if r.random() < 0.6:
                cols.append(t.col(name))
                exprs.append(f"y.`{name}`")
        names = ", ".join(f"`{c.name}`" for c in cols)
        where = f"y.{self.key_range(src)}"
        y = r.random()
        if y < 0.4:
            verb, suffix = "INSERT IGNORE", ""
        elif y < 0.8:
            verb = "INSERT"
            c = t.col(r.choice(BASE_VALUES))
            suffix = f" ON DUPLICATE KEY UPDATE `{t.name}`.`{c.name}` = VALUES(`{c.name}`)"
        else:
            verb, suffix = "REPLACE", ""
        order = f" ORDER BY {', '.join(f'y.`{k.name}`' for k in src.keys)}"
        return (
            f"{verb} INTO `{t.name}` ({names}) SELECT {', '.join(exprs)} FROM `{src.name}` y "
            f"WHERE {where}{order}{suffix}"
        )

    def _key_change(self, t: Table) -> str:
        r = self.r
        c = r.choice(t.keys)
        if c.kind in ("int", "bigint") and c.name != "a":
            y = r.random()
            if y < 0.4:
                return f"UPDATE `{t.name}` SET `{c.name}` = {self.key_value(c)} WHERE {self.key_where(t)}"
            d = r.randint(1, 5)
            sign, order = r.choice([("+", "DESC"), ("-", "ASC"), ("+", "ASC")])
            return (
                f"UPDATE `{t.name}` SET `{c.name}` = `{c.name}` {sign} {d} WHERE {self.key_range(t)} "
                f"ORDER BY `{c.name}` {order}"
            )
        if c.kind in ("int", "bigint"):  # t_comp.a
            return f"UPDATE `{t.name}` SET `a` = {self.key_value(c)} WHERE {self.key_where(t)}"
        if c.kind == "ubig":
            return f"UPDATE `{t.name}` SET `id` = {self.key_value(c)} WHERE {self.key_where(t)}"
        # strings: to a collation-equal spelling, or another key
        expr = r.choice(
            [
                f"UPPER(`{c.name}`)",
                f"LOWER(`{c.name}`)",
                f"CONCAT(`{c.name}`, ' ')",
                f"TRIM(`{c.name}`)",
                self.key_value(c),
                self.key_value(c),
            ]
        )
        return f"UPDATE `{t.name}` SET `{c.name}` = {expr} WHERE {self.key_where(t)}"

    # ------------------------------------------------------------------ DDL

    def _ddl(self) -> str:
        r = self.r
        if self.in_tx:  # DDL commits the transaction
            self.in_tx, self.savepoints = False, []
        t = self._table()
        extras = [c for c in t.values if c.name not in BASE_VALUES and c.name != "n"]
        kinds = [("add", 5), ("drop", 3 if extras else 0), ("widen", 3), ("truncate", 1), ("index", 1)]
        kind = r.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        if kind == "add" and len(extras) < 5:
            return self._add_column(t)
        if kind == "drop" and extras:
            c = r.choice(extras)
            t.values.remove(c)
            self.dropped.append(c)
            return f"ALTER TABLE `{t.name}` DROP COLUMN `{c.name}`"
        if kind == "widen":
            pool = [c for c in t.values if c.widened() is not None]
            if self.features.key_widening:
                pool += [c for c in t.keys if c.kind == "int"]
            if pool:
                c = r.choice(pool)
                w = c.widened()
                (t.keys if c in t.keys else t.values)[(t.keys if c in t.keys else t.values).index(c)] = w
                return f"ALTER TABLE `{t.name}` MODIFY {w.sql()}"
        if kind == "index":
            if t.indexes and r.random() < 0.5:
                name = t.indexes.pop(r.randrange(len(t.indexes)))
                return f"ALTER TABLE `{t.name}` DROP INDEX `{name}`"
            self._idx_counter += 1
            name = f"ix{self._idx_counter}"
            t.indexes.append(name)
            return f"CREATE INDEX `{name}` ON `{t.name}` (`i`, `d`)"
        return f"TRUNCATE TABLE `{t.name}`"

    def _default(self, c: Col) -> str:
        v = self.value(c, null_ok=False)
        if c.kind == "varchar":
            # MariaDB shows a DEFAULT's characters beyond U+FFFF as '?' in information_schema
            # and SHOW CREATE TABLE (rows get the right value): ingest's Kafka Connect
            # schema default then differs from Debezium's, which parses the DDL (a known
            # limit). Debezium keeps a default's escapes as written ('x''y' -> x''y, 'x\'y'
            # -> x\'y), ingest has the value: no quotes or backslashes in defaults.
            v = sql_str(
                "".join(
                    ch for ch in v[1:-1].replace("''", "").replace("\\\\", "") if ord(ch) <= 0xFFFF and ch not in "'\\"
                )
            )
        if c.kind == "datetime" and "." in v:
            # at the column's precision: Debezium takes a DEFAULT as written in the DDL
            # (DATETIME(0) DEFAULT '... 58.353' -> .353), the server keeps it truncated
            head, frac = v[1:-1].split(".")
            v = sql_str(head + ("." + frac[: c.scale] if c.scale else ""))
        return v

    def _add_column(self, t: Table) -> str:
        r = self.r
        reuse = [
            c for c in self.dropped if self.features.reuse_dropped_names and all(c.name != x.name for x in t.columns)
        ]
        if reuse and r.random() < 0.5:
            c = r.choice(reuse)
            self.dropped.remove(c)
            c = replace(c)
        else:
            self._col_counter += 1
            kind = r.choice(["int", "bigint", "decimal", "varchar", "datetime", "text"])
            c = Col(
                f"x{self._col_counter}",
                kind,
                {"decimal": 8, "varchar": 20}.get(kind, 0),
                {"decimal": 3, "datetime": r.choice([0, 3, 6])}.get(kind, 0),
            )
            y = r.random()
            if self.features.implicit_default and r.random() < 0.3:
                c.nullable = False
            elif kind != "text" and y < 0.35:
                c.nullable, c.default = False, self._default(c)
            elif kind != "text" and y < 0.6:
                c.default = self._default(c)
        where = r.choice(["", "", " FIRST", f" AFTER `{r.choice(t.columns).name}`"])
        t.values.append(c)
        return f"ALTER TABLE `{t.name}` ADD COLUMN {c.sql()}{where}"


# ----------------------------------------------------------------------------- running

# errors a statement may end with (the generator does not model rows or lengths)
EXPECTED_ERRORS = {
    1062,  # duplicate key
    1305,  # savepoint does not exist
    1264,  # out of range
    1406,  # data too long
    1048,  # column cannot be null
    1366,  # incorrect value
    1292,  # incorrect datetime (an interval out of range)
    1690,  # BIGINT UNSIGNED value out of range (arithmetic)
    1441,  # datetime function overflow
    1365,  # division by 0
    1364,  # a NOT NULL column without default left out
}


@dataclass
class RunStats:
    executed: int = 0
    failed: int = 0
    errors: dict = field(default_factory=dict)  # code -> count

    def add(self, other: "RunStats") -> None:
        self.executed += other.executed
        self.failed += other.failed
        for k, v in other.errors.items():
            self.errors[k] = self.errors.get(k, 0) + v


def execute(cur, statements, stats: RunStats | None = None, on_statement=None) -> RunStats:
    """Runs statements on a cursor; expected errors are counted, others raised (with the
    statement). ``on_statement(sql)`` is called after each one (e.g. to pace or sync)."""
    import pymysql

    stats = stats or RunStats()
    for sql in statements:
        stats.executed += 1
        try:
            cur.execute(sql)
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args else None
            if code not in EXPECTED_ERRORS:
                raise RuntimeError(f"unexpected error {exc!r} from: {sql[:500]}") from exc
            stats.failed += 1
            stats.errors[code] = stats.errors.get(code, 0) + 1
        if on_statement is not None:
            on_statement(sql)
    return stats


DDL_PREFIXES = ("ALTER ", "CREATE ", "TRUNCATE ", "DROP ", "RENAME ")


def is_ddl(sql: str) -> bool:
    return sql.upper().startswith(DDL_PREFIXES)


def opens_transaction(sql: str) -> bool | None:
    """True/False when the statement opens/ends a transaction (DDL ends one), else None."""
    if sql in ("BEGIN", "START TRANSACTION"):
        return True
    if sql in ("COMMIT", "ROLLBACK") or is_ddl(sql):
        return False
    return None


def execute_tolerant(cur, statements) -> int:
    """Runs statements ignoring every SQL error (for minimising: a statement left without
    the DDL it needed just fails). Returns how many failed."""
    import pymysql

    failed = 0
    for sql in statements:
        try:
            cur.execute(sql)
        except pymysql.err.MySQLError:
            failed += 1
    return failed


# ----------------------------------------------------------------------------- minimising


def minimise(statements: list[str], fails, log=print) -> list[str]:
    """Delta debugging (Zeller's ddmin): a smallest-found sublist for which ``fails(sub)``
    is still true. ``fails`` runs a candidate (each call is a whole differential run)."""
    current = list(statements)
    n = 2
    while len(current) >= 2:
        size = -(-len(current) // n)
        chunks = [current[i : i + size] for i in range(0, len(current), size)]
        reduced = False
        for i in range(len(chunks)):
            complement = [s for j, c in enumerate(chunks) if j != i for s in c]
            if complement and fails(complement):
                current, n, reduced = complement, max(n - 1, 2), True
                log(f"minimise: {len(current)} statements still diverge")
                break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), n * 2)
    return current
