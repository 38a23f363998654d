"""`cdc shard remove NAME`: after a shard was taken out of both configs, delete its rows
from the sinks (``--delete-rows``) or list what stays (``--keep-rows``), with the merger
stopped (docs/operations/shards.md).

A shard's rows are those whose origin column (``__cdc_origin``, ``<shard>/<db>.<table>``)
starts with ``<shard>/``, in every table the merger's status lists whose sink table has
that column. Each sink does the work (``Sink.count_origin`` / ``Sink.delete_origin``; the
Kafka changelog sink writes a delete and a tombstone per live key of the shard); a sink
that cannot is named in the output. Nothing else is recorded: running it again deletes nothing more.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from cdc.config import ConfigError
from cdc.routes import ORIGIN_COLUMN

SHARD_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_removable(cfg: Any, name: str) -> None:
    """The refusals that need only the config: a sharded source, a shard name, and the
    shard no longer listed."""
    if not SHARD_NAME.fullmatch(name):
        raise ConfigError(f"shard name {name!r}: 1 to 64 letters, digits, '_' or '-'")
    shards = [s.name for s in cfg.shards or []]
    if not shards:
        raise ConfigError("the config lists no shards: `cdc shard remove` is for a sharded source (docs/sharding.md)")
    if name in shards:
        raise ConfigError(
            f"shard {name} is still listed in the config's shards: remove it from the ingest and the merger "
            "configs first (docs/operations/shards.md, Remove a shard)"
        )


def check_deletable(cfg: Any, name: str) -> None:
    """Key mode ``unique``: ``__cdc_origin`` names the last writer of a row, so a row moved
    away from the shard may still name it: its rows cannot be told by origin."""
    if cfg.key_mode == "unique":
        raise ConfigError(
            f"key_mode: unique: shard {name}'s rows cannot be deleted by origin, since a row moved to another "
            f"shard may still name {name} as its origin (__cdc_origin names the row's last writer); use "
            "--keep-rows, and move or delete the shard's key ranges in the source first (docs/sharding.md, section 4)"
        )


def known_tables(store: Any) -> list[str]:
    """The tables of the merger's last status (``<db>.<table>``)."""
    status = store.read_status()
    if status is None:
        raise ConfigError(f"no merger status in {store.root}: has `cdc merge` run with this state_dir?")
    return sorted(status.get("tables") or {})


def sink_name(sink: Any) -> str:
    return getattr(sink, "section", "") or type(sink).__name__


def supports_origin(sink: Any) -> bool:
    from merger.sinks.base import Sink

    return type(sink).delete_origin is not Sink.delete_origin


def remove_shard(
    cfg: Any, store: Any, name: str, delete: bool, build_sinks: Callable[[Any], list], say: Callable[[str], None]
) -> dict[tuple[str, str], int | str]:
    """Delete (or count) the shard's rows in every sink; per (table, sink): the rows, or
    why nothing was done there. Refuses (ConfigError/MergerError) before touching a sink."""
    from merger.sinks.base import TableId

    check_removable(cfg, name)
    if delete:
        check_deletable(cfg, name)
    if store.running_merger() is not None:
        raise ConfigError(
            f"a merger is running on state_dir {store.root} (pid {store.running_merger()}): stop it first"
        )
    tables = known_tables(store)
    prefix = f"{name}/"
    done: dict[tuple[str, str], int | str] = {}
    with store.merger_kept_out():
        sinks = build_sinks(cfg)
        try:
            for sink in sinks:
                sname = sink_name(sink)
                if not supports_origin(sink):
                    done[("*", sname)] = "not supported"
                    say(f"{sname}: not supported (it cannot delete rows by origin): shard {name}'s rows stay there")
                    continue
                for table in tables:
                    db, _, tname = table.partition(".")
                    tid = TableId(db, tname)
                    if delete:
                        n = sink.delete_origin(tid, ORIGIN_COLUMN, prefix)
                    else:
                        n = sink.count_origin(tid, ORIGIN_COLUMN, prefix)
                    if n is None:
                        continue  # no sink table, or one without the origin column
                    done[(table, sname)] = n
                    say(f"{table} {sname}: {'deleted' if delete else 'kept'} {n} rows of shard {name}")
        finally:
            for sink in sinks:
                sink.close()
    if not any(isinstance(v, int) for v in done.values()):
        say(f"no table of the sinks has the {ORIGIN_COLUMN} column: nothing of shard {name} there")
    return done
