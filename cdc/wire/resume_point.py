"""What ingest commits to ``<prefix>.offsets`` with each Kafka transaction: its position.

* ``ResumePoint``: one server's position. ``gtid_state`` is the MariaDB GTID position
  (``domain-server-seq`` per domain) of the last source transaction whose changes are all
  committed to Kafka; ``file`` and ``pos`` the binlog position read up to; ``epoch`` the
  ``EventPosition.epoch`` of its records. When a large source transaction is cut into several
  Kafka transactions (always at a row-event boundary), ``trx_gtid`` names it and
  ``trx_events`` counts its row events already committed, so a restart skips exactly those.
* ``PositionVector``: a sharded source's positions, one ``ResumePoint`` per shard.

Ingest writes them (ingest.producer) and resumes from them; the merger reads them to know
how far ingest has committed (positional snapshot windows, merger.snapshot.positions).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ResumePoint:
    gtid_state: str
    file: str | None = None
    pos: int | None = None
    trx_gtid: str | None = None
    trx_events: int = 0
    ts_ms: int = 0
    server_id: int | None = None  # @@server_id of the source the position is on
    epoch: int = 0  # EventPosition.epoch of the records: +1 at each failover ingest continued across
    # key mode unique: the control rows of moves the shard's reader passed (ingest.cutover)
    cutover: list | None = None

    def as_dict(self) -> dict:
        data = asdict(self)
        if data["cutover"] is None:
            del data["cutover"]
        return data

    def to_json(self) -> bytes:
        return json.dumps(self.as_dict(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "ResumePoint":
        data = json.loads(raw)
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class PositionVector:
    """A sharded source's position: one ``ResumePoint`` per shard, committed as one record
    with the events of every shard that the Kafka transaction holds (docs/sharding.md)."""

    shards: dict[str, ResumePoint]
    emitted: int = 0  # key mode unique: the emission counter's last value (ingest.cutover)

    def to_json(self) -> bytes:
        data: dict = {"shards": {name: point.as_dict() for name, point in sorted(self.shards.items())}}
        if self.emitted:
            data["emitted"] = self.emitted
        return json.dumps(data, separators=(",", ":")).encode()

    def with_point(self, shard: str, point: ResumePoint) -> "PositionVector":
        return PositionVector({**self.shards, shard: point}, self.emitted)


def position_record(raw: bytes) -> ResumePoint | PositionVector:
    """A position record of the offsets topic: one server's ``ResumePoint`` or a sharded
    source's ``PositionVector``."""
    data = json.loads(raw)
    if isinstance(data, dict) and isinstance(data.get("shards"), dict):
        return PositionVector(
            {
                name: ResumePoint(**{k: entry.get(k) for k in ResumePoint.__dataclass_fields__ if k in entry})
                for name, entry in data["shards"].items()
            },
            int(data.get("emitted") or 0),
        )
    return ResumePoint.from_json(raw)
