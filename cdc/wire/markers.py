"""Markers: op "m" message records that ingest writes into every partition of a table's
topic, told apart by their header (and ``message.prefix``). The header's value is the
marker as compact JSON; the same JSON is the message content.

* a watermark marker: ``{"table": "db.t", "window": <id>, "kind": "low" | "high"}``
  (what the merger wrote to the watermark table); in key mode ``unique`` with
  ``"cutover": {"passed": [...], "switched": [...]}``: the control rows of moves of the
  table the shard's reader had passed there, and the moves switched by then
  (``cdc.shard_cutover``), by which the merger drops window rows the shard did not own;
* a DDL marker: what a DDL did to one table (schemas/ddl-marker.schema.json, built by
  ``cdc.ddl.ddl_marker``).
"""

from __future__ import annotations

import json
from typing import Any


def encode_marker(marker: dict[str, Any]) -> str:
    return json.dumps(marker, separators=(",", ":"))


def decode_marker(raw: bytes | str) -> dict[str, Any]:
    return json.loads(raw)


def watermark_marker(table: str, window: Any, kind: Any, cutover: dict | None = None) -> str:
    """The header value (and message content) of a watermark marker."""
    marker = {"table": table, "window": window, "kind": kind}
    if cutover is not None:
        marker["cutover"] = cutover
    return encode_marker(marker)
