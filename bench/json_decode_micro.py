"""The merger's JSON decode of a record value, micro-benchmark (issue 43; docs/performance.md
found it the largest share of the driver's CPU in a catch-up).

The values are real Debezium 3.6 change events of an all-types table (every MySQL type the
type matrix covers), with their schemas, as Debezium wrote them (``tests/golden/
debezium_default.json``): ``{"schema": ..., "payload": ...}`` as the merger reads them.
Each is decoded ``--repeat`` times by ``json.loads`` (the baseline, the decode before) and
by ``merger.batch.records.json_of`` (orjson, ``json`` for what orjson cannot read exactly);
the figure is µs per value, best of ``--rounds``.

    .venv/bin/python bench/json_decode_micro.py [--repeat 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from merger.batch.records import json_of

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden" / "debezium_default.json"


def values() -> list[bytes]:
    golden = json.loads(GOLDEN.read_text())
    schemas = golden["schemas"]
    out = []
    for record in golden["records"]:
        value = record.get("value")
        if value is None:
            continue
        text = '{"schema":%s,"payload":%s}' % (schemas[value["schema"]], value["payload"])
        out.append(text.encode())
    return out


def best_us(decode, data: list[bytes], repeat: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(repeat):
            for raw in data:
                decode(raw)
        best = min(best, (time.perf_counter() - t0) / (repeat * len(data)) * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    data = values()
    assert all(json_of(raw) == json.loads(raw) for raw in data)
    size = sum(map(len, data)) / len(data)
    base = best_us(json.loads, data, args.repeat, args.rounds)
    ours = best_us(json_of, data, args.repeat, args.rounds)
    print(f"{len(data)} Debezium values, {size:.0f} bytes on average")
    print(f"json.loads (baseline): {base:.2f} us/value")
    print(f"json_of (orjson):      {ours:.2f} us/value  ({base / ours:.2f}x)")


if __name__ == "__main__":
    main()
