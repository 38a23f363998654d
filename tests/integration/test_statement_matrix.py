"""What real applications write, through the whole pipeline (ingest, broker, merger, Delta
and PostgreSQL): triggers, stored procedures, multi-table UPDATE/DELETE, INSERT ... ON
DUPLICATE KEY UPDATE, REPLACE, INSERT ... SELECT, LOAD DATA, mixed InnoDB/MyISAM
transactions (committed and rolled back), ORM savepoints, XA, rows over 1 MB. Some rows
exist before the merger sees the tables (snapshotted, as new tables), the rest stream; every sink table must end
equal to the source, row for row."""

from __future__ import annotations

import pymysql
import pytest

from tests.ingest_harness import wait_caught_up
from tests.merger_harness import SinkChecker

pytestmark = pytest.mark.integration

TABLES = {
    "customers": "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL, orders_count INT NOT NULL "
    "DEFAULT 0) ENGINE=InnoDB",
    "orders": "CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, customer INT NOT NULL, total DECIMAL(12,2), "
    "status VARCHAR(20) NOT NULL DEFAULT 'new', note LONGTEXT) ENGINE=InnoDB",
    "items": "CREATE TABLE items (order_id INT, line INT, sku VARCHAR(20) CHARACTER SET utf8mb4 COLLATE "
    "utf8mb4_general_ci, qty INT, PRIMARY KEY (order_id, line)) ENGINE=InnoDB",
    "audit": "CREATE TABLE audit (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id INT, what VARCHAR(20)) ENGINE=InnoDB",
    "counters": "CREATE TABLE counters (name VARCHAR(20) PRIMARY KEY, n INT NOT NULL) ENGINE=MyISAM",
}


def _conn(stack, db=None, **kw):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
        **kw,
    )


def _setup(stack, db: str) -> None:
    conn = _conn(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db} CHARACTER SET utf8mb4")
        cur.execute(f"USE {db}")
        for ddl in TABLES.values():
            cur.execute(ddl)
        for trigger, event, row in (
            ("orders_ai", "INSERT", "NEW"),
            ("orders_au", "UPDATE", "NEW"),
            ("orders_ad", "DELETE", "OLD"),
        ):
            cur.execute(
                f"CREATE TRIGGER {trigger} AFTER {event} ON orders FOR EACH ROW "
                f"INSERT INTO audit (order_id, what) VALUES ({row}.id, '{event.lower()}')"
            )
        cur.execute(
            "CREATE TRIGGER customers_count AFTER INSERT ON orders FOR EACH ROW "
            "UPDATE customers SET orders_count = orders_count + 1 WHERE id = NEW.customer"
        )
        cur.execute("""CREATE PROCEDURE place_order(IN c INT, IN n INT)
            BEGIN
              DECLARE i INT DEFAULT 0;
              INSERT INTO orders (customer, total) VALUES (c, 0);
              SET @oid = LAST_INSERT_ID();
              WHILE i < n DO
                INSERT INTO items VALUES (@oid, i, CONCAT('sku-', i), i + 1);
                SET i = i + 1;
              END WHILE;
              UPDATE orders SET total = n * 9.99 WHERE id = @oid;
            END""")
        # rows before the merger starts: they come by the snapshot
        cur.executemany("INSERT INTO customers (id, name) VALUES (%s, %s)", [(i, f"c{i}") for i in range(1, 51)])
        for i in range(1, 201):
            cur.execute(
                "INSERT INTO orders (customer, total, note) VALUES (%s, %s, %s)",
                (i % 50 + 1, i * 1.25, "ünïcode 🙂" if i % 7 == 0 else None),
            )
            cur.execute("INSERT INTO items VALUES (%s, 1, %s, 1)", (i, f"SKU-{i}"))
        cur.execute("INSERT INTO counters VALUES ('orders', 200), ('refunds', 0)")
    conn.close()


def _workload(stack, db: str, tmp_path) -> None:
    conn = _conn(stack, db, local_infile=True)
    with conn.cursor() as cur:
        cur.execute("CALL place_order(3, 5)")
        cur.execute("CALL place_order(4, 0)")
        # multi-table UPDATE and DELETE
        cur.execute(
            "UPDATE orders o JOIN customers c ON c.id = o.customer "
            "SET o.status = 'vip', c.name = CONCAT(c.name, '*') WHERE c.id IN (5, 6)"
        )
        cur.execute("DELETE i, o FROM items i JOIN orders o ON o.id = i.order_id WHERE o.customer = 7")
        # INSERT ... ON DUPLICATE KEY UPDATE: both paths in one statement
        cur.execute(
            "INSERT INTO items VALUES (1, 1, 'sku-1', 5), (1, 2, 'new', 1), (2, 1, 'x', 1) "
            "ON DUPLICATE KEY UPDATE qty = qty + VALUES(qty)"
        )
        # REPLACE: a delete and an insert of the same key, and a plain insert
        cur.execute("REPLACE INTO customers (id, name, orders_count) VALUES (8, 'replaced', 0), (500, 'new', 0)")
        # INSERT ... SELECT
        cur.execute(
            "INSERT INTO items (order_id, line, sku, qty) SELECT id, 9, 'bulk', 2 FROM orders "
            "WHERE id BETWEEN 20 AND 60"
        )
        # an update that changes nothing, and one that changes the key of many rows
        cur.execute("UPDATE orders SET status = status WHERE id < 10")
        cur.execute("UPDATE items SET line = line + 100 WHERE order_id BETWEEN 61 AND 70")
        # LOAD DATA
        data = tmp_path / "items.tsv"
        data.write_text("".join(f"{1000 + i}\t1\tloaded-{i}\t{i}\n" for i in range(300)))
        cur.execute(f"LOAD DATA LOCAL INFILE '{data}' INTO TABLE items")
        # mixed InnoDB and MyISAM: committed, then rolled back (the MyISAM change stays)
        cur.execute("BEGIN")
        cur.execute("INSERT INTO orders (customer, total) VALUES (9, 1.00)")
        cur.execute("UPDATE counters SET n = n + 1 WHERE name = 'orders'")
        cur.execute("COMMIT")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO orders (customer, total) VALUES (10, 2.00)")
        cur.execute("UPDATE counters SET n = n + 1 WHERE name = 'refunds'")
        cur.execute("ROLLBACK")
        # an ORM's nested transactions (Django atomic(), Rails requires_new)
        for sql in [
            "BEGIN",
            "INSERT INTO orders (customer, total) VALUES (11, 3.00)",
            "SAVEPOINT s1",
            "INSERT INTO orders (customer, total) VALUES (11, 4.00)",
            "ROLLBACK TO SAVEPOINT s1",
            "SAVEPOINT s2",
            "UPDATE orders SET status = 'paid' WHERE id = 11",
            "RELEASE SAVEPOINT s2",
            "SAVEPOINT s3",
            "DELETE FROM items WHERE order_id = 12",
            "UPDATE counters SET n = n + 10 WHERE name = 'refunds'",  # MyISAM: ROLLBACK TO is logged
            "ROLLBACK TO SAVEPOINT s3",
            "COMMIT",
        ]:
            cur.execute(sql)
        # XA, two-phase
        xid = f"'{db}'"
        for sql in [
            f"XA START {xid}",
            "UPDATE orders SET status = 'xa' WHERE id BETWEEN 30 AND 35",
            f"XA END {xid}",
            f"XA PREPARE {xid}",
            f"XA COMMIT {xid}",
        ]:
            cur.execute(sql)
        # rows over 1 MB, inserted and updated
        big = "é" * 1_500_000
        cur.execute("INSERT INTO orders (customer, total, note) VALUES (12, 5.00, %s)", (big,))
        cur.execute("UPDATE orders SET note = CONCAT(note, 'x') WHERE id = 100")
        cur.execute("UPDATE orders SET note = %s WHERE id = 101", (big + "!",))
        # deletes through the trigger's table and a range
        cur.execute("DELETE FROM orders WHERE id BETWEEN 150 AND 160")
    conn.close()


@pytest.mark.timeout(900)
def test_application_statements_reach_every_sink(stack, unique_name, tmp_path, pipeline):
    db = pipeline.database(unique_name)
    mark = pipeline.mark()
    _setup(stack, db)
    checker = SinkChecker(stack, pipeline.work)
    try:
        for table in TABLES:  # the snapshot first
            checker.wait_equal(db, table, timeout_s=300, proc=pipeline.merger)
        _workload(stack, db, tmp_path)
        wait_caught_up(stack, pipeline.prefix, proc=pipeline.ingest)
        for table in TABLES:
            checker.wait_equal(db, table, timeout_s=240, proc=pipeline.merger)
        assert pipeline.ingest.alive() and pipeline.merger.alive()
        assert "Traceback" not in pipeline.merger_log_since(mark), pipeline.merger_log_since(mark)[-3000:]
    finally:
        checker.close()
