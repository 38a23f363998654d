"""ShardedCatalog's origins (merger/schema/catalog.py): which physical tables of which shard make
a logical table, and how often each shard's tables are listed."""

from __future__ import annotations

from cdc.config import MySQLConfig
from cdc.routes import Route, Routes
from merger.schema import catalog as catalog_module
from merger.schema.catalog import ShardedCatalog


class Listing:
    """A shard's catalog that counts its listings."""

    def __init__(self, tables: list[str]):
        self.tables = tables
        self.listed = 0

    def list_tables(self) -> list[str]:
        self.listed += 1
        return list(self.tables)


def _catalog(tables: dict[str, list[str]]) -> ShardedCatalog:
    routes = Routes([Route(r"shop\.orders_\d+", "shop.orders")], "origin", sharded=True)
    cat = ShardedCatalog({name: MySQLConfig() for name in tables}, routes)
    cat.servers = {name: Listing(t) for name, t in tables.items()}
    return cat


def test_many_lookups_share_one_listing_per_shard_and_a_new_table_is_found():
    cat = _catalog({"s1": ["shop.orders_1", "shop.orders_2", "shop.items"], "s2": ["shop.orders_1", "shop.items"]})
    for _ in range(100):
        assert [o.describe() for o in cat.origins("shop.orders")] == [
            "shard s1: shop.orders_1",
            "shard s1: shop.orders_2",
            "shard s2: shop.orders_1",
        ]
        assert [o.name for o in cat.origins("shop.items")] == ["s1/shop.items", "s2/shop.items"]
    assert [c.listed for c in cat.servers.values()] == [1, 1]
    # a table created since the listing: not found in it, so listed again at once
    cat.servers["s2"].tables.append("shop.payments")
    assert [o.name for o in cat.origins("shop.payments")] == ["s2/shop.payments"]
    assert [c.listed for c in cat.servers.values()] == [2, 2]
    assert cat.origins("shop.nothing") == []


def test_a_listing_is_reused_only_for_a_while(monkeypatch):
    cat = _catalog({"s1": ["shop.items"], "s2": []})
    now = [1000.0]
    monkeypatch.setattr(catalog_module.time, "monotonic", lambda: now[0])
    assert len(cat.origins("shop.items")) == 1
    cat.servers["s2"].tables.append("shop.items")  # a new origin of a known table
    assert len(cat.origins("shop.items")) == 1  # within the listing's life
    now[0] += catalog_module.LISTING_TTL_S + 0.1
    assert len(cat.origins("shop.items")) == 2
    assert cat.list_tables() == ["shop.items"]
