"""The instance lease (ingest.lease): which lease shows another ingest running."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ingest.lease import TTL_S, Lease, held_by_another, lease_key

NOW = 1_800_000_000_000


def _lease(identity: str = "cdc-ingest-a", age_ms: int = 0) -> Lease:
    return Lease(identity, "a", "host1", 42, "run1", NOW - age_ms)


def test_another_identity_renewed_lately_holds_it():
    assert held_by_another(_lease(age_ms=1000), "cdc-ingest-b", NOW)


def test_own_identity_is_a_predecessor_not_another_instance():
    assert not held_by_another(_lease(age_ms=0), "cdc-ingest-a", NOW)


def test_no_lease_or_a_stale_one_is_free():
    assert not held_by_another(None, "cdc-ingest-b", NOW)
    assert not held_by_another(_lease(age_ms=int(TTL_S * 1000)), "cdc-ingest-b", NOW)


@given(st.integers(min_value=-10_000, max_value=10 * int(TTL_S * 1000)))
def test_held_exactly_while_younger_than_the_ttl(age_ms):
    assert held_by_another(_lease(age_ms=age_ms), "other", NOW) == (age_ms < TTL_S * 1000)


def test_json_round_trip_and_foreign_records():
    lease = _lease()
    assert Lease.from_json(lease.to_json()) == lease
    for raw in (b"{}", b"not json", b"[1]", b'{"identity": "x"}'):
        assert Lease.from_json(raw) is None
    assert lease_key("p") == b'{"lease":"p"}'
    assert "state_name a" in lease.describe() and "pid 42" in lease.describe()
