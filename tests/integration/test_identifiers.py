"""Hostile identifiers end to end: a database, tables and columns named with quotes,
backticks, spaces, reserved words, dots, ``%`` and non-ASCII letters go through ingest,
the broker and the merger into Delta and PostgreSQL, snapshot and streaming alike, and
the sink tables equal the source row for row.

Topic names are made legal the way Debezium does it (``cdc.wire.topics``); the merger routes
records by their ``source`` block, so the lossy topic names do not matter to it.
"""

from __future__ import annotations

import re

import pymysql
import pytest

from cdc.quoting import quote_ident as q
from cdc.wire.topics import table_topic
from tests.ingest_harness import wait_caught_up
from tests.kafka_util import list_topics
from tests.merger_harness import SinkChecker

# reserved words, quotes of every kind, spaces, a dot, '%' (which delta-rs would decode in
# a path), a slash, non-ASCII letters
TABLES = {
    "select": (
        "CREATE TABLE {t} (`order` INT PRIMARY KEY, `from` VARCHAR(20), `sp ace` INT, "
        "`we\"ird` VARCHAR(20), `it's` INT, `back``tick` TEXT, `a,b;c{{d}}(e)=f` INT)"
    ),
    "Straße 表": (
        "CREATE TABLE {t} (`Schlüssel` VARCHAR(20), `表` INT, `wert €` DECIMAL(10,2), "
        "PRIMARY KEY (`Schlüssel`, `表`)) CHARACTER SET utf8mb4"
    ),
    "dot.ted 50%20off/x": 'CREATE TABLE {t} (`id` BIGINT PRIMARY KEY, `Wert` VARCHAR(30), `is "ok"?` BOOLEAN)',
}


def _conn(stack, db=None):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
        charset="utf8mb4",
    )


def _load(cur, db: str, first: int, last: int) -> None:
    # '%' doubled: pymysql %-formats statements that have parameters
    t = {name: f"{q(db)}.{q(name)}".replace("%", "%%") for name in TABLES}
    for i in range(first, last + 1):
        cur.execute(
            f"INSERT INTO {t['select']} VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (i, f"from {i}", i * 2, f"q\"{i}'", i % 7, f"`{i}`", -i),
        )
        cur.execute(f"INSERT INTO {t['Straße 表']} VALUES (%s, %s, %s)", (f"Schlüssel-{i % 5}", i, i / 4))
        cur.execute(f"INSERT INTO {t['dot.ted 50%20off/x']} VALUES (%s, %s, %s)", (i, f"wert {i}", i % 2))


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_hostile_identifiers_replicate_to_delta_and_postgres(stack, unique_name, pipeline):
    # the database name itself: space, double and single quotes, backtick, non-ASCII
    db = pipeline.database(f"id {unique_name} \"q\" 'a' `b` Straße")
    mark = pipeline.mark()
    root = _conn(stack)
    checker = SinkChecker(stack, pipeline.work)
    try:
        with root.cursor() as cur:
            cur.execute(f"CREATE DATABASE {q(db)} CHARACTER SET utf8mb4")
            for name, ddl in TABLES.items():
                cur.execute(ddl.format(t=f"{q(db)}.{q(name)}"))
            _load(cur, db, 1, 300)  # snapshotted (the merger finds the tables new)
        wait_caught_up(stack, pipeline.prefix, proc=pipeline.ingest)
        for name in TABLES:
            checker.wait_equal(db, name, proc=pipeline.merger, timeout_s=400)

        # streaming: inserts, updates (one of them changes a primary key), deletes, and a
        # column added with a hostile name
        t = {name: f"{q(db)}.{q(name)}" for name in TABLES}
        with root.cursor() as cur:
            _load(cur, db, 301, 400)
            cur.execute(f"UPDATE {t['select']} SET `from` = 'upd\"ated', `sp ace` = -1 WHERE `order` % 3 = 0")
            cur.execute(f"UPDATE {t['select']} SET `order` = 10000 WHERE `order` = 7")
            cur.execute(f"DELETE FROM {t['select']} WHERE `order` BETWEEN 20 AND 40")
            cur.execute(f"UPDATE {t['Straße 表']} SET `wert €` = 0.25 WHERE `表` < 50")
            cur.execute(f"DELETE FROM {t['Straße 表']} WHERE `表` % 4 = 1")
            cur.execute(f"UPDATE {t['dot.ted 50%20off/x']} SET `Wert` = CONCAT(`Wert`, ' ✓') WHERE id > 350")
            cur.execute(f"DELETE FROM {t['dot.ted 50%20off/x']} WHERE id < 10")
            cur.execute(f"ALTER TABLE {t['select']} ADD COLUMN `new \"col\" 'x'` INT")
            cur.execute(f"UPDATE {t['select']} SET `new \"col\" 'x'` = `order` WHERE `order` > 390")
        wait_caught_up(stack, pipeline.prefix, proc=pipeline.ingest)
        for name in TABLES:
            checker.wait_equal(db, name, proc=pipeline.merger, timeout_s=300)

        # topics carry the Debezium-sanitized names
        topics = set(list_topics(stack.kafka.bootstrap, pipeline.prefix))
        for name in TABLES:
            assert table_topic(pipeline.prefix, db, name) in topics, (name, topics)
        assert all(re.fullmatch(r"[A-Za-z0-9._-]+", t) for t in topics)
        assert pipeline.ingest.alive() and pipeline.merger.alive()
        log = pipeline.merger_log_since(mark)
        assert "Traceback" not in log, log[-3000:]
    finally:
        checker.close()
        root.close()
