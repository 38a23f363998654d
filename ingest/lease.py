"""Which ingest writes a ``topic_prefix``: the instance lease on ``<prefix>.offsets``.

Only one ingest may write a topic prefix. Each instance holds a lease: a record keyed
``{"lease": <prefix>}`` on the offsets topic, renewed at most every ``RENEW_S`` seconds
before a commit, written by a producer whose transactional.id is the prefix's
(``lease_transactional_id``). Initialising that producer fences the lease producer of
any earlier instance, whatever its ``state_name``, so the earlier one stops at its next
renewal (Kafka's zombie fencing). At start, a lease of another identity (another
``state_name``) renewed less than ``TTL_S`` seconds ago means that instance is running:
the new one stops instead of taking over. A lease of the same identity is a predecessor
(killed, or a zombie): its producers are fenced and it stops.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

RENEW_S = 5.0
TTL_S = 30.0  # several renewals: an instance that commits renews well within it


@dataclass(frozen=True)
class Lease:
    identity: str  # the transactional.id of the instance's producer
    state_name: str | None
    host: str
    pid: int
    run: str  # one per process start
    renewed_ms: int

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "Lease | None":
        """The lease, or None for a record that is not one (written by something else)."""
        try:
            data = json.loads(raw)
            return cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except (ValueError, TypeError, KeyError):
            return None

    def describe(self) -> str:
        name = f"state_name {self.state_name}" if self.state_name else "no state_name"
        return f"{name} (transactional.id {self.identity}) on host {self.host}, pid {self.pid}"


def lease_key(prefix: str) -> bytes:
    return json.dumps({"lease": prefix}, separators=(",", ":")).encode()


def lease_name(prefix: str, shard: str | None = None) -> str:
    """The lease of a prefix's whole ingest, or of one shard's (what ``cdc ingest --shard`` takes)."""
    return prefix if shard is None else f"{prefix}/{shard}"


def lease_transactional_id(prefix: str) -> str:
    return f"cdc-lease-{prefix}"


def held_by_another(lease: Lease | None, identity: str, now_ms: int, ttl_s: float = TTL_S) -> bool:
    """Whether ``lease`` shows another instance running: another identity, renewed lately."""
    return lease is not None and lease.identity != identity and now_ms - lease.renewed_ms < ttl_s * 1000
