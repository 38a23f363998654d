"""Tests of the ``cdc_kafka`` streaming source (merger/kafka/).

Unit tests cover the options and the reader's pickling (the pure offset planning is in
test_kafka_offsets.py). Integration tests run against the local stack's Tansu broker and a
real Spark in local mode. On this broker, records of aborted transactions are visible to
read_committed consumers (see DESIGN.md); these tests use committed, open and plain
records only: downstream consumers drop replays by source position, not this source.
"""

from __future__ import annotations

import pytest

from merger.kafka.datasource import CdcKafkaStreamReader
from merger.kafka.options import KafkaSourceError, SourceOptions
from merger.kafka.reader import SCHEMA

# =========================================================================== unit tests


def test_options_parse():
    opts = SourceOptions.parse(
        {
            # Spark passes the keys lower-cased
            "kafka.bootstrap.servers": "h:1",
            "subscribepattern": r"^cdc\.[^.]+\.[^.]+$",
            "kafka.security.protocol": "SASL_SSL",
            "maxoffsetspertrigger": "500",
            "endprobe": "WATERMARK",
            "failondataloss": "false",
        }
    )
    assert opts.kafka_conf == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL"}
    assert opts.max_offsets_per_trigger == 500 and opts.end_probe == "watermark"
    assert opts.matches("cdc.db.t") and not opts.matches("cdc.offsets")
    assert not opts.matches("cdc.transaction") and not opts.matches("cdc")
    assert not opts.matches("xcdc.db.t")
    conf = opts.consumer_conf()
    assert conf["isolation.level"] == "read_committed"
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["enable.auto.commit"] is False and conf["auto.offset.reset"] == "earliest"
    # camelCase keys work too (a caller outside Spark)
    assert SourceOptions.parse(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "a, b", "maxOffsetsPerTrigger": 3}
    ).topics == ("a", "b")
    for bad in (
        {"subscribe": "a"},
        {"kafka.bootstrap.servers": "h:1"},
        {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "subscribepattern": "a"},
        {"kafka.bootstrap.servers": "h:1", "subscribepattern": "("},
        {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "endprobe": "x"},
        {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxoffsetspertrigger": "0"},
    ):
        with pytest.raises(KafkaSourceError):
            SourceOptions.parse(bad)


def test_kafka_config_file(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("# secrets\nsasl.password = s3cret\nbootstrap.servers=file:1\n")
    opts = SourceOptions.parse({"kafkaconfigfile": str(f), "subscribe": "a", "kafka.bootstrap.servers": "opt:1"})
    assert opts.kafka_conf == {"sasl.password": "s3cret", "bootstrap.servers": "opt:1"}


def test_reader_pickles_without_clients():
    import pickle

    reader = CdcKafkaStreamReader({"kafka.bootstrap.servers": "h:1", "subscribe": "a"}, SCHEMA)
    reader._broker = object()  # stands for live clients in the planner process
    assert pickle.loads(pickle.dumps(reader))._broker is None


# =========================================================================== integration
