"""The sink registry builds what the merger config names, in build order, and says what
is missing in one line."""

from __future__ import annotations

import pytest

from cdc.config import MergerConfig
from merger.errors import MergerError
from merger.history.modes import ChangelogMode
from merger.sinks import registry
from merger.sinks.delta import DeltaSink
from merger.sinks.kafka_changelog import KafkaChangelogSink
from merger.sinks.postgres import PostgresSink


def _config(tmp_path, *sections: str) -> MergerConfig:
    sinks = {
        "delta": {"path": str(tmp_path / "delta")},
        "postgres": {"host": "127.0.0.1", "port": 1, "user": "u", "dbname": "d"},
        "kafka_changelog": {"topic_prefix": "merged"},
    }
    return MergerConfig(sinks={s: sinks[s] for s in sections})


def test_every_config_section_has_a_kind_in_build_order():
    from cdc.config import SinksConfig

    assert [k.section for k in registry.KINDS] == list(SinksConfig.model_fields)


@pytest.mark.parametrize(
    "sections",
    [("delta",), ("postgres",), ("kafka_changelog",), ("kafka_changelog", "delta"), ("postgres", "delta")],
)
def test_builds_the_configured_sinks_in_build_order(tmp_path, sections):
    sinks = registry.build_sinks(_config(tmp_path, *sections))
    want = [
        t
        for s, t in (("delta", DeltaSink), ("postgres", PostgresSink), ("kafka_changelog", KafkaChangelogSink))
        if s in sections
    ]
    assert [type(s) for s in sinks] == want
    # each carries the section it was built from: what the commands call it
    assert [s.section for s in sinks] == [s for s in ("delta", "postgres", "kafka_changelog") if s in sections]
    for s in sinks:
        s.close()


def test_delta_sink_gets_its_settings(tmp_path):
    cfg = MergerConfig(sinks={"delta": {"path": str(tmp_path / "d"), "compact_every_commits": 7}})
    (sink,) = registry.build_sinks(cfg)
    assert sink.handles.compact_every_commits == 7


def test_none_configured_is_one_line(tmp_path):
    with pytest.raises(
        MergerError, match="configure at least one of sinks.delta, sinks.postgres, sinks.kafka_changelog"
    ):
        registry.build_sinks(MergerConfig())


def test_only_one_section(tmp_path):
    (sink,) = registry.build_sinks(_config(tmp_path, "delta", "kafka_changelog"), only=("delta",))
    assert isinstance(sink, DeltaSink)
    with pytest.raises(MergerError, match="postgres is not configured"):
        registry.build_sinks(_config(tmp_path, "delta"), only=("postgres",))


def test_the_postgres_sink_takes_every_mode(tmp_path):
    tables = {
        "shop.orders": {"mode": "changelog"},
        "shop.both": {"mode": "changelog", "image": "before_after"},
        "shop.o": {"mode": "latest"},
    }
    (sink,) = registry.build_sinks(MergerConfig(sinks={"postgres": {"tables": tables}}))
    assert (
        isinstance(sink.modes.of(("shop", "orders")), ChangelogMode) and sink.modes.of(("shop", "o")).name == "latest"
    )
    assert sink.modes.of(("shop", "both")) == ChangelogMode("before_after")
    sink.close()
