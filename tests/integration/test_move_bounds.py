"""Issue 41, item 3: a move's range is decided in SQL (the copy, the switch's check, verify)
and in Python (ingest's filter, the merger's windows), so both must order keys alike.

* ``cdc.shard_cutover.compare_keys`` against MariaDB itself: texts under the binary
  collations ``begin`` accepts (code points, PAD SPACE: control characters, trailing
  spaces, accents, characters beyond the BMP) and DECIMALs against numeric bounds;
* ``cdc shard move begin`` on real shards: a key of collation utf8mb4_general_ci (mixed
  case and accents) is refused with one line naming the collation, no row written; a
  utf8mb4_bin key is accepted, and a range empty in its order refused."""

from __future__ import annotations

import itertools
import random
from decimal import Context, Decimal

import pymysql
import pytest

from cdc.shard_cutover import compare_keys
from tests.cli_util import run_cli
from tests.shard_harness import running_shards, servers, sql, write_configs

pytestmark = pytest.mark.integration

TEXTS = ["", "a", "a ", "a  ", "a\t", "a\x01", "a\x1f", "a!", "A", "B", "b", "é", "É", "e", "m", "m\t", "m "]
TEXTS += ["mb", "\U0001f600", "\uffff", "z", "a b", "a\t ", "a \t", "eu-7", "eu-70", "EU-7"]


@pytest.fixture(scope="module")
def shard_state(tmp_path_factory, stack):
    yield from running_shards(tmp_path_factory, 2)


def test_the_order_of_keys_is_the_servers(shard_state):
    info = servers(shard_state)["shard1"]
    conn = pymysql.connect(
        ssl_disabled=True,
        host="127.0.0.1",
        port=info.mariadb.port,
        user="root",
        password=info.mariadb.root_password,
        charset="utf8mb4",
    )
    differ = []
    try:
        with conn.cursor() as cur:
            for collation in ("utf8mb4_bin", "utf8mb3_bin"):
                cs = collation.split("_")[0]
                for a, b in itertools.product(TEXTS, repeat=2):
                    if cs == "utf8mb3" and any(ord(ch) > 0xFFFF for ch in a + b):
                        continue
                    cur.execute(f"SELECT STRCMP(_{cs}%s COLLATE {collation}, _{cs}%s COLLATE {collation})", (a, b))
                    if cur.fetchone()[0] != compare_keys(a, b):
                        differ.append((collation, a, b))
            rnd = random.Random(41)
            exact = Context(prec=80)
            for _ in range(300):
                key = Decimal(rnd.randint(-(10**15), 10**15)).scaleb(-rnd.randint(6, 20))
                bound = Decimal(rnd.randint(-(10**6), 10**6)).scaleb(-rnd.randint(0, 25)) if rnd.random() < 0.5 else key
                cur.execute(
                    f"SELECT (CAST(%s AS DECIMAL(30,20)) >= {format(bound, 'f')}) - "
                    f"(CAST(%s AS DECIMAL(30,20)) <= {format(bound, 'f')})",
                    (str(key), str(key)),
                )
                stored = key.quantize(Decimal(1).scaleb(-20), context=exact)
                if cur.fetchone()[0] != compare_keys(stored, bound):
                    differ.append(("decimal", stored, bound))
    finally:
        conn.close()
    assert differ == []


def _begin(merger_cfg, *args: str):
    return run_cli("shard", "move", "begin", "--table", "bounds.orders", *args, "-c", str(merger_cfg), timeout=120)


def test_begin_refuses_a_text_range_it_cannot_order_as_the_server(shard_state, stack, tmp_path):
    shards = servers(shard_state)
    for info in shards.values():
        sql(
            info,
            "DROP DATABASE IF EXISTS bounds",
            "CREATE DATABASE bounds",
            "CREATE TABLE bounds.orders_0 (k VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci "
            "PRIMARY KEY, v INT)",
            "INSERT INTO bounds.orders_0 VALUES ('apple', 1), ('Banana', 2), ('élan', 3), ('Zebra', 4), ('mango', 5)",
            "DROP TABLE IF EXISTS cdc.cdc_cutover",
        )
    _, merger_cfg = write_configs(tmp_path, stack, shards, "bounds", "bounds", key_mode="unique")
    text = merger_cfg.read_text()
    if "key_mode" not in text:
        merger_cfg.write_text(text + "key_mode: unique\n")
    res = _begin(merger_cfg, "--from", "shard1", "--to", "shard2", "--low", "a", "--high", "m")
    lines = [line for line in (res.stdout + res.stderr).splitlines() if line.strip()]
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(lines) == 1 and "Traceback" not in res.stderr, lines
    assert "utf8mb4_general_ci" in lines[0] and "utf8mb4_bin" in lines[0], lines[0]
    for info in shards.values():  # refused before any row (nor the table) is written
        found = (
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'cdc' AND table_name = 'cdc_cutover'"
        )
        assert sql(info, found, fetch=True)[0][0] == 0

    for info in shards.values():  # the same keys, binary: accepted; a range empty in its order refused
        sql(info, "ALTER TABLE bounds.orders_0 MODIFY k VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    res = _begin(merger_cfg, "--from", "shard1", "--to", "shard2", "--low", "a", "--high", "A")
    assert res.returncode == 2 and "empty" in res.stdout + res.stderr, res.stdout + res.stderr
    res = _begin(merger_cfg, "--from", "shard1", "--to", "shard2", "--low", "A", "--high", "a")
    assert res.returncode == 0, res.stdout + res.stderr
    rows = sql(shards["shard2"], "SELECT move_id, kind, low_key, high_key FROM cdc.cdc_cutover", fetch=True)
    assert rows == ((1, "begin", '"A"', '"a"'),)
