"""`cdc shard move begin|switch`: the operator's steps of moving a key range of a logical
table from one shard to another in key mode ``unique`` (docs/sharding.md, section 4;
docs/operations/shards.md, "Move a key range between shards").

The steps write the moves' control rows into ``<watermark db>.cdc_cutover`` on the shards,
where each shard's binlog carries them to ingest at their exact place:

1. ``begin``: a **begin** row on the target, before the operator copies the range's rows
   to it (ingest does not emit the target's copy);
2. ``switch``, with the writes to the range stopped and the target caught up (checked
   here: the range's rows are compared on both shards): a **switch** row on the source,
   then on the target. Ingest emits the target's changes of the range from then on, and
   not the source's (the operator's cleanup DELETE).

One move at a time: a move begun and not switched refuses another ``begin``.
"""

from __future__ import annotations

from typing import Any, Callable

import pymysql

from cdc.config import ConfigError
from cdc.quoting import quote_ident
from cdc.shard_cutover import BEGIN, CUTOVER_TABLE, SWITCH, bound_of, bound_text, bounds_refusal, compare_keys

COLUMNS = "move_id, kind, table_name, low_key, high_key, source, target"


def bound(text: str | None) -> Any:
    """A range bound from the command line: a JSON value (``1000``, ``"eu-7"``; a number
    with a fraction is an exact Decimal, never a float), or the text itself."""
    if text is None:
        return None
    try:
        return bound_of(text)
    except ValueError:
        return text


class Keyspace:
    """The shards of the merger's config (whose users write the watermark tables, and so
    the moves' rows beside them), for the moves' steps."""

    def __init__(self, cfg: Any, connect: Callable[[Any], Any] | None = None) -> None:
        if not cfg.shards:
            raise ConfigError("the config lists no shards: `cdc shard move` is for a sharded source (docs/sharding.md)")
        if cfg.key_mode != "unique":
            raise ConfigError(
                "`cdc shard move` is for key_mode unique; in key_mode origin move rows the usual way (a moved row "
                "is a delete under its old origin and an insert under its new one): docs/sharding.md"
            )
        self.cfg = cfg
        self.shards = {s.name: s for s in cfg.shards}
        self.db = cfg.watermark_table.split(".", 1)[0]
        self.table = f"{quote_ident(self.db)}.{quote_ident(CUTOVER_TABLE)}"
        self._connect = connect or (lambda shard: pymysql.connect(**shard.mysql.connect_kwargs(), autocommit=True))
        self._conns: dict[str, Any] = {}

    def conn(self, name: str):
        if name not in self.shards:
            raise ConfigError(f"no shard {name!r} in the config (shards: {', '.join(self.shards)})")
        if name not in self._conns:
            try:
                self._conns[name] = self._connect(self.shards[name])
            except pymysql.err.OperationalError as exc:
                raise ConfigError(f"shard {name}: cannot connect ({exc.args[-1]})") from None
        return self._conns[name]

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()

    def ensure_table(self, name: str) -> None:
        with self.conn(name).cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote_ident(self.db)}")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} (move_id INT NOT NULL, kind VARCHAR(8) NOT NULL, "
                "table_name VARCHAR(255) NOT NULL, low_key TEXT NULL, high_key TEXT NULL, "
                "source VARCHAR(64) NOT NULL, target VARCHAR(64) NOT NULL, "
                "created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (move_id, kind))"
            )

    def rows(self) -> dict[int, dict[str, Any]]:
        """Every move any shard holds: number -> its fields and the shards that hold each row.
        ConfigError when two shards hold one number with different moves (a reused number)."""
        moves: dict[int, dict[str, Any]] = {}
        for name in self.shards:
            self.ensure_table(name)
            with self.conn(name).cursor() as cur:
                cur.execute(f"SELECT {COLUMNS} FROM {self.table}")
                for number, kind, table, low, high, source, target in cur.fetchall():
                    fields = {"table": table, "low": low, "high": high, "source": source, "target": target}
                    move = moves.setdefault(number, {**fields, "rows": set()})
                    if not same_move(move, fields):
                        raise ConfigError(
                            f"move {number} is two moves: {describe_row(move)} and, on shard {name}, "
                            f"{describe_row(fields)} (a reused number): delete the wrong one's rows from "
                            f"{CUTOVER_TABLE} and undo its copy (docs/operations/shards.md)"
                        )
                    move["rows"].add((kind, name))
        return moves

    def insert(self, name: str, number: int, kind: str, move: dict[str, Any], ignore: bool = True) -> None:
        """A control row; ``ignore``: a row already there is kept (a switch run again); else
        the number taken meanwhile by another begin is a ConfigError."""
        with self.conn(name).cursor() as cur:
            try:
                verb = "INSERT IGNORE" if ignore else "INSERT"
                cur.execute(
                    f"{verb} INTO {self.table} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (number, kind, move["table"], move["low"], move["high"], move["source"], move["target"]),
                )
            except pymysql.err.IntegrityError:
                raise ConfigError(
                    f"move {number} was begun on shard {name} by someone else meanwhile: see `cdc shard move` "
                    "of the other operator, then run this again"
                ) from None

    def key_columns(self, shard: str, logical: str) -> list[tuple[str, str, str, str | None]]:
        """Each physical table of ``logical`` on ``shard``: ``(where, its first key column,
        its data type, its collation)``."""
        out = []
        for db, table in self.physical_tables(shard, logical):
            with self.conn(shard).cursor() as cur:
                cur.execute(
                    "SELECT c.column_name, c.data_type, c.collation_name FROM information_schema.key_column_usage k "
                    "JOIN information_schema.columns c ON c.table_schema = k.table_schema AND "
                    "c.table_name = k.table_name AND c.column_name = k.column_name WHERE k.table_schema = %s AND "
                    "k.table_name = %s AND k.constraint_name = 'PRIMARY' ORDER BY k.ordinal_position LIMIT 1",
                    (db, table),
                )
                found = cur.fetchone()
            if found is None:
                raise ConfigError(f"shard {shard}: {db}.{table} has no primary key: its rows cannot be moved")
            out.append((f"{db}.{table} on shard {shard}", found[0], found[1], found[2]))
        return out

    def physical_tables(self, shard: str, logical: str) -> list[tuple[str, str]]:
        """The tables of ``shard`` that make up logical table ``logical`` (by the routes)."""
        from cdc.config import routes_of

        routes = routes_of(self.cfg)
        ldb, _, ltable = logical.partition(".")
        with self.conn(shard).cursor() as cur:
            cur.execute(
                "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                "AND table_schema NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')"
            )
            return sorted((db, t) for db, t in cur.fetchall() if routes.logical(db, t) == (ldb, ltable))

    def range_rows(self, shard: str, logical: str, low: Any, high: Any) -> list[tuple]:
        """The rows of the range on ``shard``, by its first key column, sorted."""
        out: list[tuple] = []
        for db, table in self.physical_tables(shard, logical):
            with self.conn(shard).cursor() as cur:
                cur.execute(
                    "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s AND "
                    "table_name = %s AND constraint_name = 'PRIMARY' ORDER BY ordinal_position LIMIT 1",
                    (db, table),
                )
                found = cur.fetchone()
                if found is None:
                    raise ConfigError(f"shard {shard}: {db}.{table} has no primary key: its rows cannot be moved")
                key = quote_ident(found[0])
                where, args = [], []
                if low is not None:
                    where.append(f"{key} >= %s")
                    args.append(low)
                if high is not None:
                    where.append(f"{key} < %s")
                    args.append(high)
                cond = " AND ".join(where) or "TRUE"
                cur.execute(f"SELECT * FROM {quote_ident(db)}.{quote_ident(table)} WHERE {cond}", args)
                out.extend(cur.fetchall())
        return sorted(out, key=repr)


def begin(ks: Keyspace, table: str, low: Any, high: Any, source: str, target: str, say: Callable[[str], None]) -> int:
    """Write move's begin row on the target; its number."""
    if "." not in table:
        raise ConfigError(f"--table {table!r}: the logical table as db.table")
    if source == target:
        raise ConfigError("--from and --to name the same shard")
    if low is not None and high is not None:
        try:
            if compare_keys(low, high) >= 0:
                raise ConfigError(f"the range is empty: --low {low!r} is not below --high {high!r}")
        except TypeError:
            raise ConfigError(
                f"--low {low!r} and --high {high!r} do not compare: give two numbers or two texts"
            ) from None
    ks.conn(source)
    ks.conn(target)
    for shard in (source, target):
        for where, column, data_type, collation in ks.key_columns(shard, table):
            refused = bounds_refusal(where, column, data_type, collation, low, high)
            if refused:
                raise ConfigError(refused)
    moves = ks.rows()
    for number, move in sorted(moves.items()):
        if (BEGIN, move["target"]) in move["rows"] and not {(SWITCH, move["source"]), (SWITCH, move["target"])} <= move[
            "rows"
        ]:
            raise ConfigError(
                f"move {number} ({move['table']} from {move['source']} to {move['target']}) is begun and not switched: "
                f"one move at a time (`cdc shard move switch {number}`)"
            )
    number = max(moves, default=0) + 1
    move = {
        "table": table,
        "low": bound_text(low),
        "high": bound_text(high),
        "source": source,
        "target": target,
    }
    ks.insert(target, number, BEGIN, move, ignore=False)
    say(
        f"move {number} begun: {table} keys {describe(low, high)} from shard {source} to shard {target}. Now copy "
        f"the range's rows to {target} and keep it following {source}'s changes of them; then stop the writes to "
        f"the range and run `cdc shard move switch {number}`"
    )
    return number


def switch(ks: Keyspace, number: int, check: bool, say: Callable[[str], None]) -> None:
    """Write move ``number``'s switch rows on the source, then on the target."""
    move = ks.rows().get(number)
    if move is None or (BEGIN, move["target"]) not in move["rows"]:
        raise ConfigError(f"no move {number} is begun (`cdc shard move begin` first)")
    low, high = bound_of(move["low"]), bound_of(move["high"])
    if check:
        on_source = ks.range_rows(move["source"], move["table"], low, high)
        on_target = ks.range_rows(move["target"], move["table"], low, high)
        if on_source != on_target:
            differ = len(set(on_source) ^ set(on_target))
            raise ConfigError(
                f"move {number}: shard {move['target']} has not caught up with {move['source']} "
                f"({len(on_source)} rows there, {len(on_target)} here, {differ} differ in {move['table']} keys "
                f"{describe(low, high)}): stop the writes to the range, let the copy catch up, run this again"
            )
        say(f"move {number}: the range's {len(on_source)} rows are equal on {move['source']} and {move['target']}")
    ks.insert(move["source"], number, SWITCH, move)
    ks.insert(move["target"], number, SWITCH, move)
    say(
        f"move {number} switched: write {move['table']} keys {describe(low, high)} to shard {move['target']} "
        f"from now on, then delete them from shard {move['source']} (ingest emits that cleanup to no sink)"
    )


def describe(low: Any, high: Any) -> str:
    return f"[{'-inf' if low is None else repr(low)}, {'+inf' if high is None else repr(high)})"


def same_move(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two rows of one number hold one move (bounds compared as values)."""
    return all(a[f] == b[f] for f in ("table", "source", "target")) and all(
        bound_of(a[f]) == bound_of(b[f]) for f in ("low", "high")
    )


def describe_row(move: dict[str, Any]) -> str:
    low, high = bound_of(move["low"]), bound_of(move["high"])
    return f"{move['table']} keys {describe(low, high)} from {move['source']} to {move['target']}"
