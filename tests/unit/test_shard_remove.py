"""`cdc shard remove` without servers: the LIKE prefix, the refusals, and what it does
with sinks that can and cannot delete by origin (fakes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cdc.cli.shard import check_removable, remove_shard
from cdc.config import ConfigError
from merger.errors import MergerError
from merger.sinks.base import Sink, SinkError, like_prefix
from merger.state.store import StateStore


def test_like_prefix_escapes_the_wildcards():
    assert like_prefix("shard2/") == "shard2/%"
    assert like_prefix("shard_2/") == "shard\\_2/%"
    assert like_prefix("a%b\\c") == "a\\%b\\\\c%"


def cfg(*names, key_mode="origin"):
    return SimpleNamespace(shards=[SimpleNamespace(name=n) for n in names], key_mode=key_mode)


@pytest.mark.parametrize(
    "config, name, message",
    [
        (cfg(), "shard2", "lists no shards"),
        (cfg("shard1", "shard2"), "shard2", "still listed"),
        (cfg("shard1"), "shard 2", "1 to 64 letters"),
        (cfg("shard1"), "../x", "1 to 64 letters"),
    ],
)
def test_refusals_of_the_config(config, name, message):
    with pytest.raises(ConfigError, match=message):
        check_removable(config, name)


class FakeSink(Sink):
    ensure_table = apply = truncate = rows = applied_version = None

    def __init__(self, rows):
        self.data = rows  # table -> list of origins, or None: no origin column
        self.closed = False

    def count_origin(self, table, column, prefix):
        held = self.data.get(str(table))
        return None if held is None else sum(o.startswith(prefix) for o in held)

    def delete_origin(self, table, column, prefix):
        n = self.count_origin(table, column, prefix)
        if n:
            self.data[str(table)] = [o for o in self.data[str(table)] if not o.startswith(prefix)]
        return n

    def close(self):
        self.closed = True


class LogOnlySink(Sink):
    """A sink without rows by origin (the contract's default)."""

    ensure_table = apply = truncate = rows = applied_version = None


def store_with(tmp_path, tables):
    store = StateStore(tmp_path)
    store.write_status({"tables": {t: {} for t in tables}})
    return store


def test_delete_rows_then_nothing_the_second_time(tmp_path):
    sink = FakeSink({"d.orders": ["shard1/d.o_0", "shard2/d.o_0", "shard2/d.o_1", "shard22/d.o_0"], "d.plain": None})
    store = store_with(tmp_path, ["d.orders", "d.plain"])
    lines = []
    done = remove_shard(cfg("shard1"), store, "shard2", True, lambda c: [sink, LogOnlySink()], lines.append)
    assert done == {("d.orders", "FakeSink"): 2, ("*", "LogOnlySink"): "not supported"}
    assert sink.data["d.orders"] == ["shard1/d.o_0", "shard22/d.o_0"] and sink.closed
    assert "d.orders FakeSink: deleted 2 rows of shard shard2" in lines
    assert any(line.startswith("LogOnlySink: not supported") for line in lines)
    done = remove_shard(cfg("shard1"), store, "shard2", True, lambda c: [sink], lines.append)
    assert done == {("d.orders", "FakeSink"): 0}


def test_keep_rows_counts_and_changes_nothing(tmp_path):
    sink = FakeSink({"d.orders": ["shard1/x", "shard2/x"]})
    lines = []
    done = remove_shard(
        cfg("shard1"), store_with(tmp_path, ["d.orders"]), "shard2", False, lambda c: [sink], lines.append
    )
    assert done == {("d.orders", "FakeSink"): 1} and sink.data["d.orders"] == ["shard1/x", "shard2/x"]
    assert lines == ["d.orders FakeSink: kept 1 rows of shard shard2"]


def test_key_mode_unique_refuses_deleting_rows_and_keeps_them(tmp_path):
    """A row moved away from the shard may still name it as its origin (the last writer):
    --delete-rows is refused with one line before a sink is opened; --keep-rows counts."""
    sink = FakeSink({"d.orders": ["shard1/x", "shard2/x"]})
    store = store_with(tmp_path, ["d.orders"])

    def no_sinks(c):
        raise AssertionError("sinks opened")

    with pytest.raises(ConfigError, match="key_mode: unique") as exc:
        remove_shard(cfg("shard1", key_mode="unique"), store, "shard2", True, no_sinks, print)
    assert "\n" not in str(exc.value) and "--keep-rows" in str(exc.value)
    done = remove_shard(cfg("shard1", key_mode="unique"), store, "shard2", False, lambda c: [sink], print)
    assert done == {("d.orders", "FakeSink"): 1} and sink.data["d.orders"] == ["shard1/x", "shard2/x"]


def test_refused_while_a_merger_runs(tmp_path):
    store = store_with(tmp_path, ["d.orders"])
    store.lock()  # this process is the merger
    try:

        def no_sinks(c):
            raise AssertionError("sinks opened")

        with pytest.raises((ConfigError, MergerError), match="merger is running"):
            remove_shard(cfg("shard1"), StateStore(tmp_path), "shard2", True, no_sinks, print)
    finally:
        store._lock_file.close()


def test_no_status_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no merger status"):
        remove_shard(cfg("shard1"), StateStore(tmp_path), "shard2", True, lambda c: [], print)


def test_the_default_sink_cannot():
    with pytest.raises(SinkError, match="cannot delete"):
        LogOnlySink().delete_origin(("d", "t"), "__cdc_origin", "s/")
