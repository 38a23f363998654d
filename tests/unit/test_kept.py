"""merger.batch.kept: which tables have changes kept on disk (one listing, not a stat per table)."""

from __future__ import annotations

from merger.batch.kept import keep, kept_dir, tables_with_kept
from merger.state.store import StateStore


def test_tables_with_kept_names_exactly_the_tables_with_a_kept_directory(tmp_path):
    store = StateStore(tmp_path / "state")
    names = ["db.a", "db.b", "shop.Straße", "db.c"]
    assert tables_with_kept(store, names) == []  # no paused/ directory at all
    keep(store, 7, "db.b", [])
    keep(store, 8, "shop.Straße", [])
    assert tables_with_kept(store, names) == ["db.b", "shop.Straße"]
    assert tables_with_kept(store, ["db.a", "db.c"]) == []
    (kept_dir(store, "db.b") / "batch-000000000007.parquet").unlink()
    kept_dir(store, "db.b").rmdir()
    assert tables_with_kept(store, names) == ["shop.Straße"]
