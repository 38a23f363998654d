"""Verify's reader of each sink, found by the sink's name: the section of ``sinks:`` in the
merger config, as ``merger.sinks.registry.KINDS`` names it. ``KINDS`` here lists the same
sections in the same order (``tests/unit/test_verify_sink_names.py`` keeps the two in step),
each with its reader or the reason verify cannot read that sink by key range.

A new sink is a reader module in this package (a ``SinkReader`` with its own rules) and one
line here; ``cdc verify``, ``cdc repair`` and continuous verification find it through
``sink_reader`` and ``readable``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from merger.verify.sinks.base import SinkReader
from merger.verify.sinks.delta import DeltaReader
from merger.verify.sinks.postgres import PostgresReader


@dataclass(frozen=True)
class ReaderKind:
    """``section``: the field of ``SinksConfig``; ``open(section config)``: verify's reader of
    the sink, None when verify cannot read it by key range (``why_not`` says why)."""

    section: str
    open: Callable[[Any], SinkReader] | None
    why_not: str | None = None


KINDS = (
    ReaderKind(DeltaReader.name, DeltaReader.from_config),
    ReaderKind(PostgresReader.name, PostgresReader.from_config),
    ReaderKind("kafka_changelog", None, "changelog topics cannot be read by key range"),
)


def kind_of(name: str) -> ReaderKind | None:
    return next((k for k in KINDS if k.section == name), None)


def readable() -> list[str]:
    """The sinks verify reads by key range, in build order."""
    return [k.section for k in KINDS if k.open is not None]


def configured(sinks_config: Any) -> list[str]:
    """The sinks the config (``cdc.config.SinksConfig``) names, in build order."""
    return [k.section for k in KINDS if getattr(sinks_config, k.section, None) is not None]


def configured_readable(sinks_config: Any) -> list[str]:
    """The configured sinks verify reads by key range, in build order."""
    return [name for name in configured(sinks_config) if name in readable()]


def why_not(name: str) -> str | None:
    """Why verify cannot read the sink ``name`` by key range (None: it can)."""
    kind = kind_of(name)
    return kind.why_not if kind is not None else f"sink {name!r} cannot be read by key range"


def sink_reader(name: str, sinks_config: Any) -> SinkReader:
    """Verify's reader of one configured sink (``cdc.config.SinksConfig``): its own client."""
    kind = kind_of(name)
    if kind is None or kind.open is None:
        raise ValueError(f"sink {name!r} cannot be read by key range")
    return kind.open(getattr(sinks_config, name))
