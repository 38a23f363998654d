"""merger.batch.records.json_of (orjson, ``json`` for what orjson refuses) against the simple
model, ``json.loads``: the same value, or a ValueError from both, for every input."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from merger.batch.records import BadRecord, json_of, payload_of

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)  # past orjson's 64 bits
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # lone surrogates included
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


def same(a, b) -> bool:
    """Equal, NaN equal to NaN, and of the same types (1 is not 1.0, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def outcome(fn, raw):
    try:
        return ("value", fn(raw))
    except ValueError:
        return ("error", None)


@given(values, st.booleans())
def test_the_value_json_loads_reads(value, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    want, got = outcome(json.loads, raw), outcome(json_of, raw)
    assert want[0] == got[0] and same(want[1], got[1]), (raw, want, got)


@given(st.binary(max_size=40) | st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_garbage_is_refused_or_read_alike(raw):
    want, got = outcome(json.loads, raw), outcome(json_of, raw)
    assert want[0] == got[0] and same(want[1], got[1]), (raw, want, got)


def test_the_cases_orjson_alone_refuses():
    for raw, value in [
        (b"[NaN]", [float("nan")]),
        (b"[Infinity, -Infinity]", [float("inf"), float("-inf")]),
        (b"18446744073709551616", 2**64),
        (b"[-9223372036854775809, 123456789012345678901234567890]", [-(2**63) - 1, 123456789012345678901234567890]),
        (b'"\\ud800"', "\ud800"),
        (b'{"a": 1, "a": 2}', {"a": 2}),
        ('{"k": "é"}'.encode("utf-16"), {"k": "é"}),
    ]:
        assert same(json_of(raw), value), raw


def test_the_integers_at_the_64_bit_edges_are_exact():
    for n in (2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**19 - 1, 10**19, -(10**18)):
        raw = json.dumps({"v": [n, str(n)]}).encode()
        got = json_of(raw)["v"]
        assert type(got[0]) is int and got == [n, str(n)], raw


def test_a_value_that_is_not_json_is_a_bad_record():
    for raw in (b"{", b"", b"\xff\xfe\xfd"):
        try:
            payload_of(raw)
        except BadRecord as exc:
            assert "not JSON" in str(exc)
        else:
            raise AssertionError(raw)
