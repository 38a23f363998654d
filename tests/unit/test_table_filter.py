"""The merger's table filter: include / exclude regexes, never the snapshot bookkeeping
tables; asked once per record, so its answers are cached, and a cached answer must be the
same as the first."""

from cdc.config import MergerConfig
from merger.app import table_filter


def test_include_exclude_and_bookkeeping_tables_repeatedly():
    cfg = MergerConfig(table_include=[r"shop\..*", r"crm\.accounts"], table_exclude=[r"shop\.tmp_.*"])
    accepts = table_filter(cfg)
    expected = {
        "shop.orders": True,
        "shop.tmp_load": False,
        "crm.accounts": True,
        "crm.accounts_old": False,  # fullmatch, not a prefix
        "hr.people": False,
        cfg.watermark_table: False,
        cfg.signal_table: False,
    }
    for _ in range(3):
        assert {name: accepts(name) for name in expected} == expected


def test_no_include_takes_every_table_but_the_excluded():
    cfg = MergerConfig(table_exclude=[r"audit\..*"])
    accepts = table_filter(cfg)
    assert [accepts(n) for n in ("a.b", "audit.log", "a.b", "audit.log")] == [True, False, True, False]
