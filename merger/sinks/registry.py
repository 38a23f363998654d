"""The sinks a merger configuration names, built from it: one ``SinkKind`` per section of
``sinks:`` in the merger config (``cdc.config.SinksConfig``).

A kind names its config section and a factory ``build(section, config)`` that imports the
sink's package only when the section is configured (Delta, PostgreSQL and Kafka each pull
in their own libraries). ``KINDS`` is in build order, which matters: key mode ``unique``
reads each key's owner from the first sink that keeps rows (``merger.batch.owner_check``).
A new sink is its package, its config class in ``SinksConfig`` and one line here, and the
line of its verify reader in ``merger.verify.sinks.registry`` (a test keeps the two in step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from merger.errors import MergerError
from merger.history.modes import TableModes, table_modes


def _delta(section: Any, config: Any):
    from merger.sinks.delta import DeltaSink

    return DeltaSink(
        section.path,
        storage_options=section.storage_options(),
        compact_every_commits=section.compact_every_commits,
        compact_target_mb=section.compact_target_mb,
        modes=_modes(section),
    )


def _modes(section: Any) -> TableModes:
    """The sink's table modes, from its ``tables:`` (the sink refuses a mode it does not have)."""
    return table_modes({name: entry.model_dump() for name, entry in (getattr(section, "tables", None) or {}).items()})


def _postgres(section: Any, config: Any):
    from merger.sinks.postgres import PostgresSink

    return PostgresSink(
        section.settings(), schema=section.schema_, nul_policy=section.nul_policy, modes=_modes(section)
    )


def _kafka_changelog(section: Any, config: Any):
    from merger.sinks.kafka_changelog import KafkaChangelogSink

    return KafkaChangelogSink(config.kafka.client_config(), section.topic_prefix, partitions=section.partitions)


@dataclass(frozen=True)
class SinkKind:
    """``section``: the field of ``SinksConfig``; ``build(section config, merger config)``."""

    section: str
    build: Callable[[Any, Any], Any]


KINDS = (
    SinkKind("delta", _delta),
    SinkKind("postgres", _postgres),
    SinkKind("kafka_changelog", _kafka_changelog),
)


def configured(config: Any) -> list[SinkKind]:
    """The kinds whose section the merger config fills, in build order."""
    return [kind for kind in KINDS if getattr(config.sinks, kind.section, None) is not None]


def build_sinks(config: Any, only: tuple[str, ...] | None = None) -> list:
    """The configured sinks, in build order; ``only``: just these sections (a section named
    there and not configured is an error)."""
    kinds = configured(config)
    if only is not None:
        missing = [name for name in only if name not in {k.section for k in kinds}]
        if missing:
            raise MergerError(f"sinks: {', '.join(missing)} is not configured (see sinks.{missing[0]} in the config)")
        kinds = [k for k in kinds if k.section in only]
    if not kinds:
        raise MergerError("sinks: configure at least one of " + ", ".join(f"sinks.{kind.section}" for kind in KINDS))
    sinks = []
    for kind in kinds:
        sink = kind.build(getattr(config.sinks, kind.section), config)
        sink.section = kind.section  # what the commands call it (``cdc shard remove``'s report)
        sinks.append(sink)
    return sinks
