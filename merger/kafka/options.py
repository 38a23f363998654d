"""The options of the ``cdc_kafka`` source, parsed and validated once per reader. What each
option means: docs/configuration.md, section "The `cdc_kafka` stream source"."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc.errors import CdcError


class KafkaSourceError(CdcError, RuntimeError):
    """A problem reading Kafka that a user must look at (bad option, data loss, timeout)."""


@dataclass(frozen=True)
class SourceOptions:
    kafka_conf: dict[str, str] = field(repr=False)  # may hold secrets
    pattern: str | None = None
    topics: tuple[str, ...] = ()
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    end_probe: str = "scan"
    scan_max_records: int = 50_000
    max_records_per_partition: int | None = None
    records_per_task: int = 100_000
    min_partitions: int = 1
    fail_on_data_loss: bool = True
    read_timeout_s: float = 120.0
    probe_timeout_s: float = 15.0
    arrow_batch_size: int = 10_000
    tick_file: str | None = None
    batch_memory_bytes: int | None = None
    record_sizes_file: str | None = None
    topic_ids_file: str | None = None
    outage_max_s: float = 0.0  # kafka.outage_max_s: 0 = wait for the broker for as long as it takes
    moved_topics_from: str | None = None  # ingest's offsets topic (merger.kafka.end_check)
    end_check_all_s: float = 5.0
    min_batch_gap_s: float = 0.0  # merger.kafka.pacing: 0 = batches at every trigger
    prompt_file: str | None = None  # until when batches are not held (the merger's watermarks)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SourceOptions:
        opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(options).items()}
        conf: dict[str, str] = {}
        path = opts.get("kafkaconfigfile")
        if path:
            conf.update(_read_properties(path))
        conf.update({k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")})
        conf.update(_secret_options(opts))
        if not conf.get("bootstrap.servers"):
            raise KafkaSourceError("option kafka.bootstrap.servers is required")
        pattern = opts.get("subscribepattern") or None
        topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
        if bool(pattern) == bool(topics):
            raise KafkaSourceError("give exactly one of the options subscribePattern, subscribe")
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KafkaSourceError(f"subscribePattern is not a valid regex: {exc}") from None
        probe = opts.get("endprobe", "scan").lower()
        if probe not in ("scan", "watermark"):
            raise KafkaSourceError(f"endProbe must be scan or watermark, not {probe!r}")

        def pos_int(name: str, default: int | None) -> int | None:
            raw = opts.get(name.lower())
            if raw in (None, ""):
                return default
            try:
                value = int(raw)
            except ValueError:
                raise KafkaSourceError(f"option {name} must be an integer, not {raw!r}") from None
            if value <= 0:
                raise KafkaSourceError(f"option {name} must be > 0, not {value}")
            return value

        return cls(
            kafka_conf=conf,
            pattern=pattern,
            topics=topics,
            starting_offsets=opts.get("startingoffsets", "earliest").strip() or "earliest",
            max_offsets_per_trigger=pos_int("maxOffsetsPerTrigger", None),
            end_probe=probe,
            scan_max_records=pos_int("scanMaxRecords", 50_000),
            max_records_per_partition=pos_int("maxRecordsPerPartition", None),
            records_per_task=pos_int("recordsPerTask", 100_000),
            min_partitions=pos_int("minPartitions", 1),
            fail_on_data_loss=opts.get("failondataloss", "true").lower() != "false",
            read_timeout_s=pos_int("readTimeoutMs", 120_000) / 1000.0,
            probe_timeout_s=pos_int("probeTimeoutMs", 15_000) / 1000.0,
            arrow_batch_size=pos_int("arrowBatchSize", 10_000),
            tick_file=opts.get("tickfile") or None,
            batch_memory_bytes=pos_int("batchMemoryBytes", None),
            record_sizes_file=opts.get("recordsizesfile") or None,
            topic_ids_file=opts.get("topicidsfile") or None,
            outage_max_s=0 if opts.get("brokeroutagemaxs", "0") in ("", "0") else pos_int("brokerOutageMaxS", None),
            moved_topics_from=opts.get("movedtopicsfrom") or None,
            end_check_all_s=pos_int("endCheckAllMs", 5_000) / 1000.0,
            min_batch_gap_s=(pos_int("minBatchGapMs", None) or 0) / 1000.0,
            prompt_file=opts.get("promptfile") or None,
        )

    def matches(self, topic: str) -> bool:
        if self.pattern:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def consumer_conf(self, **defaults: Any) -> dict[str, Any]:
        """librdkafka settings: ours as defaults, the user's passthrough on top, then the
        few settings this source depends on."""
        conf: dict[str, Any] = {
            "group.id": "cdc-kafka-source",  # required by the client; never joined
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
            "socket.nagle.disable": True,
            **defaults,
        }
        conf.update(self.kafka_conf)
        conf.update(
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error" if self.fail_on_data_loss else "earliest",
            }
        )
        return conf


def _secret_options(opts: Mapping[str, str]) -> dict[str, str]:
    """``kafkaSecretEnv.<property>`` (an environment variable) and ``kafkaSecretFile.<property>``
    (a file holding the value): secrets read where the client is built, so that neither
    the options, the query plan nor the checkpoint ever holds them."""
    out: dict[str, str] = {}
    for key, ref in opts.items():
        if key.startswith("kafkasecretenv."):
            prop = key[len("kafkasecretenv.") :]
            if ref not in os.environ:
                raise KafkaSourceError(f"option {key}: environment variable {ref} is not set")
            out[prop] = os.environ[ref]
        elif key.startswith("kafkasecretfile."):
            prop = key[len("kafkasecretfile.") :]
            try:
                with open(ref, encoding="utf-8") as f:
                    out[prop] = f.read().rstrip("\n")
            except OSError as exc:
                raise KafkaSourceError(f"option {key}: cannot read {ref}: {exc.strerror}") from None
    return out


def _read_properties(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith(("#", "!")):
                    continue
                key, sep, value = line.partition("=")
                if sep:
                    out[key.strip()] = value.strip()
    except OSError as exc:
        raise KafkaSourceError(f"cannot read kafkaConfigFile {path}: {exc}") from None
    return out
