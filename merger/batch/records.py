"""Kafka records of a table's topic, parsed into the changes the merger applies.

A record is parsed once (``parse``: headers, JSON payload, source position) and then
turned into a ``ChangeEvent`` (``change_event``): a data change, a truncate, a DBLog
watermark marker or a DDL marker, with the two orders the merger needs (see
``ChangeEvent``); the data changes of a table are decoded into its Arrow schema
(``decode``). No I/O here.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import orjson
import pyarrow as pa

from cdc.wire.headers import DDL_HEADER, POSITION_HEADER, WATERMARK_HEADER, header_map
from cdc.wire.markers import decode_marker
from cdc.wire.position import EventPosition
from merger.errors import BadChange, BadRecord, MergerError
from merger.history.modes import BEFORE_IMAGE, COMMIT_US, before_column
from merger.schema.canonical import rows_to_arrow
from merger.schema.change import rows_to_arrow_lenient

if TYPE_CHECKING:
    from merger.sources import SourceKind

MARKER = "m"  # op of a watermark marker
SCHEMA = "s"  # op of a DDL marker


class ParsedRecord(NamedTuple):
    record: dict  # the Kafka record (topic, partition, offset, value, headers)
    headers: dict  # header name -> bytes
    payload: Any  # the JSON value (the Debezium payload); None for a tombstone
    position: EventPosition | None  # where in the binlog the change was read


class ChangeEvent(NamedTuple):
    """One change of a table, as the merger applies it."""

    partition: int
    seq: int  # the sink's sequence: orders the changes of one key (binlog position, Kafka offset or emission)
    op: str  # c u d r t, MARKER (watermark) or SCHEMA (DDL marker)
    image: Any  # the row (after; before for d), the marker's JSON, or None for a truncate
    record: dict  # the Kafka record it came from (dead-letter, spill files)
    order: int  # binlog order across partitions (cuts at truncates and DDL); key mode unique: the emission
    commit_us: int | None = None  # the source's commit time (source.ts_us, else ts_ms), microseconds
    before: Any = None  # the payload's ``before`` of an update or a delete (a change log's before image)


def commit_us_of(payload: dict | None) -> int | None:
    """A change's source commit time in microseconds since the epoch: Debezium's
    ``source.ts_us`` (2.x), else ``source.ts_ms`` (a binlog event's time, whole seconds)."""
    src = (payload or {}).get("source") or {}
    us, ms = src.get("ts_us"), src.get("ts_ms")
    if isinstance(us, int) and not isinstance(us, bool):
        return us
    if isinstance(ms, int) and not isinstance(ms, bool):
        return ms * 1000
    return None


class Decoded(NamedTuple):
    events: list  # the events that decoded, in their order
    table: pa.Table  # their rows, with _cdc_op and _cdc_seq
    keys: list  # their keys (tuples of the key columns' values)


# the Kafka record's columns the merger reads (the dead-letter topic and the kept files
# carry them too): not the timestamp, whose datetimes were 40 % of a batch's conversion to
# Python, and which nothing reads
RECORD_COLUMNS = ("key", "value", "topic", "partition", "offset", "headers")
# the source's other columns, dropped before the batch goes to Python: a drop by name is one
# Py4J call, a select a column lookup each (measured: 5 against 14.5 ms a micro-batch)
UNREAD_COLUMNS = ("timestamp", "timestampType")


def kafka_rows(records: pa.Table) -> list[dict]:
    """A micro-batch's Kafka records as dicts of ``RECORD_COLUMNS`` (those it has), in
    topic, partition and offset order. A record's ``headers`` are a dict of name -> value
    (what the processor reads), or the list of ``{key, value}`` as the source gives them
    when a name repeats (so nothing is lost on the way to the dead-letter topic); None when
    the record has none. Built column by column: ``Table.to_pylist`` made a dict per
    header and per record, at twice the cost (docs/performance.md)."""
    if not records.num_rows:
        return []
    columns = [c for c in RECORD_COLUMNS if c in records.column_names]
    order = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    table = records.select(columns).sort_by(order)
    values = [_header_dicts(table.column(c)) if c == "headers" else table.column(c).to_pylist() for c in columns]
    return [dict(zip(columns, row)) for row in zip(*values)]


def rows_of(records: pa.Table | list[dict]) -> list[dict]:
    """A micro-batch's records as ``kafka_rows`` gives them: from Spark's Arrow, or as the
    driver's read already made them (``merger.kafka.reader.messages_to_rows``)."""
    return records if isinstance(records, list) else kafka_rows(records)


def _header_dicts(column: pa.ChunkedArray) -> list:
    """A headers column (list of struct key, value) as one dict per record (see
    ``kafka_rows``)."""
    headers = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not pa.types.is_list(headers.type) or not pa.types.is_struct(headers.type.value_type):
        return headers.to_pylist()
    offsets = headers.offsets.to_pylist()  # into the values of the whole array (a slice too)
    base = offsets[0]
    flat = headers.values.slice(base, offsets[-1] - base)
    names, values = flat.field("key").to_pylist(), flat.field("value").to_pylist()
    offsets = [o - base for o in offsets]
    valid = headers.is_valid().to_pylist()
    out: list = []
    for i, ok in enumerate(valid):
        if not ok:
            out.append(None)
            continue
        a, b = offsets[i], offsets[i + 1]
        out.append(header_map(list(zip(names[a:b], values[a:b]))))
    return out


def headers_of(raw) -> dict[str, bytes]:
    """A record's headers as name -> value (the last one of a repeated name)."""
    if not raw:
        return {}
    if isinstance(raw, dict):
        return raw
    return {h["key"]: h["value"] for h in raw}


def header_pairs(raw) -> list[tuple[str, bytes]]:
    """A record's headers as (name, value) pairs, in either form ``kafka_rows`` gives."""
    if not raw:
        return []
    if isinstance(raw, dict):
        return list(raw.items())
    return [(h["key"], h["value"]) for h in raw]


# every digit read as "0": an integer literal's shape, which says whether orjson reads it exactly
DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= i <= 0x39 else i for i in range(256))
TWENTY_DIGITS, MINUS_NINETEEN_DIGITS = b"0" * 20, b"-" + b"0" * 19


def past_64_bits(value: bytes) -> bool:
    """Whether ``value`` may hold an integer outside [-2**63, 2**64 - 1], which orjson turns
    into a float without a word: a run of 20 digits, or a minus and 19 (digits inside a
    string count too: such a value is only read the slower way, never wrongly)."""
    shape = value.translate(DIGITS_AS_ZERO)
    return TWENTY_DIGITS in shape or MINUS_NINETEEN_DIGITS in shape


def json_of(value: bytes) -> Any:
    """``json.loads(value)``, by orjson where that reads it exactly (the merger's hottest
    Python call: docs/performance.md). ``json`` reads what orjson refuses (NaN, infinities,
    lone surrogates, other encodings) and integers past 64 bits: the result is
    ``json.loads``'s for every input, a ``ValueError`` for what neither reads."""
    if isinstance(value, str):  # a test's or a kept file's text: read as it always was
        return json.loads(value)
    if not past_64_bits(value):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            pass
    return json.loads(value)


def payload_of(value: bytes) -> dict:
    try:
        v = json_of(value)
    except ValueError as exc:
        raise BadRecord(f"value is not JSON: {exc}") from None
    if isinstance(v, dict) and "schema" in v and "payload" in v:
        v = v["payload"]
    if not isinstance(v, dict):
        raise BadRecord("value is not a JSON object")
    return v


def position_of(headers: dict, payload: dict | None) -> EventPosition | None:
    """The record's binlog position, validated (ValueError or BadRecord if garbled): the
    replay filter must never advance to a position that is not one."""
    raw = headers.get(POSITION_HEADER)
    if raw is not None:
        return EventPosition.decode(raw)
    src = (payload or {}).get("source") or {}
    if "file" in src and "pos" in src:  # topics written by Debezium itself
        try:
            return EventPosition(str(src["file"]), int(src["pos"]), int(src.get("row") or 0)).checked()
        except TypeError:
            raise BadRecord(
                f"source.file/pos/row is not a binlog position: {src.get('file')!r}:{src.get('pos')!r}"
            ) from None
    return None


def parse(record: dict) -> ParsedRecord:
    """Headers, payload and position of a record (raises BadRecord or ValueError)."""
    headers = headers_of(record.get("headers"))
    value = record.get("value")
    payload = payload_of(value) if value is not None else None
    return ParsedRecord(record, headers, payload, position_of(headers, payload))


def change_event(item: ParsedRecord, source: SourceKind) -> ChangeEvent:
    """The change a parsed (non-tombstone) record carries, on topics written by ``source``.
    Raises BadRecord for an unknown op, a change without its row image, or a record
    without the order its kind needs."""
    r, headers, payload, pos = item
    # order: binlog order across partitions (cuts at truncates; in key mode unique the
    # emission counter); seq: the sink's sequence, the kind's (the order for ingest's
    # topics; on Debezium's many records share one position, so there it is the Kafka
    # offset: merger.sources)
    order = source.order_of(item)
    seq = source.sequence_of(order, r["offset"])
    ddl = headers.get(DDL_HEADER)
    if ddl is not None:  # a DDL marker (cdc.ddl.ddl_marker)
        return ChangeEvent(r["partition"], seq, SCHEMA, decode_marker(ddl), r, order, commit_us_of(payload))
    marker = headers.get(WATERMARK_HEADER)
    if marker is not None or payload.get("op") == "m":
        if marker is None:
            content = (payload.get("message") or {}).get("content")
            marker = base64.b64decode(content) if content else b"{}"
        return ChangeEvent(r["partition"], seq, MARKER, decode_marker(marker), r, order, commit_us_of(payload))
    op = payload.get("op")
    before = payload.get("before") if op in ("u", "d") else None
    if op in ("c", "u", "r"):
        image = payload.get("after")
    elif op == "d":
        image = payload.get("before")
    elif op == "t":
        image = None
    else:
        raise BadRecord(f"unknown op {op!r}")
    if op != "t" and not isinstance(image, dict):
        raise BadRecord(f"op {op} without an image")
    return ChangeEvent(r["partition"], seq, op, image, r, order, commit_us_of(payload), before)


def _before_images(evs: list[ChangeEvent], rt) -> list[dict | None]:
    """The before image of each event (None for an insert or a snapshot row); an update or
    a delete without one pauses the table: its change log cannot show the row before it."""
    images = []
    for ev in evs:
        if ev.op in ("u", "d"):
            # an update's before image without columns its after image has: a source writing
            # partial row images (binlog_row_image=MINIMAL or NOBLOB), never a NULL shown as a value
            partial = isinstance(ev.before, dict) and ev.op == "u" and not ev.image.keys() <= ev.before.keys()
            if not isinstance(ev.before, dict) or partial:
                r = ev.record
                raise BadChange(
                    f"{rt.name}: the change at topic {r['topic']} partition {r['partition']} offset {r['offset']} "
                    f"({ev.op}) has {'a partial' if partial else 'no'} before image, and the table's change log "
                    "keeps it (image: before_after); the source must write full row images (binlog_row_image=FULL)"
                )
            images.append(ev.before)
        else:
            images.append(None)
    return images


def _with_before(table: pa.Table, before: pa.Table) -> pa.Table:
    """``table`` with ``before``'s columns appended, each named ``before_column(name)``."""
    for f in before.schema:
        table = table.append_column(pa.field(before_column(f.name), f.type, metadata=f.metadata), before[f.name])
    return table


def decode(
    evs: list[ChangeEvent], rt, bad: Callable[[ChangeEvent, str], None], extra: frozenset[str] = frozenset()
) -> Decoded | None:
    """The data events (no markers, no truncates) of table ``rt`` (a ``TableRuntime``)
    decoded into its Arrow schema, with ``_cdc_op``/``_cdc_seq``, and ``_cdc_commit_us``
    if ``extra`` (the columns the table's sink modes need) names it; if it names
    ``BEFORE_IMAGE``, the before image of each change too, decoded the same way (an update
    or a delete without one raises ``BadChange``). An event that does not decode goes to
    ``bad(ev, reason)`` (which may raise) and is left out."""
    if not evs:
        return None
    if rt.spec_since and any(ev.order < rt.spec_since for ev in evs):
        # older than the DDL the definition comes from (a lagging partition): leniently
        old = [ev for ev in evs if ev.order < rt.spec_since]
        new = decode([ev for ev in evs if ev.order >= rt.spec_since], rt, bad, extra)
        table, kept = rows_to_arrow_lenient(rt.schema, rt.converters, [ev.image for ev in old], rt.keys)
        old = [old[i] for i in kept]
        table = table.append_column("_cdc_op", pa.array([ev.op for ev in old], pa.string())).append_column(
            "_cdc_seq", pa.array([ev.seq for ev in old], pa.int64())
        )
        if COMMIT_US in extra:
            table = table.append_column(COMMIT_US, pa.array([ev.commit_us for ev in old], pa.int64()))
        if BEFORE_IMAGE in extra:
            before, _ = rows_to_arrow_lenient(rt.schema, rt.converters, _before_images(old, rt), [])
            table = _with_before(table, before)
        if new is not None:
            old, table = old + new[0], pa.concat_tables([table, new[1]])
        if not old:
            return None
        return Decoded(old, table, list(zip(*[table.column(k).to_pylist() for k in rt.keys])))
    befores = _before_images(evs, rt) if BEFORE_IMAGE in extra else None
    try:
        table = rows_to_arrow(
            rt.spec,
            rt.schema,
            rt.converters,
            [ev.image for ev in evs],
            extra={
                "_cdc_op": (pa.string(), [ev.op for ev in evs]),
                "_cdc_seq": (pa.int64(), [ev.seq for ev in evs]),
                **({COMMIT_US: (pa.int64(), [ev.commit_us for ev in evs])} if COMMIT_US in extra else {}),
            },
        )
        if befores is not None:
            table = _with_before(table, rows_to_arrow(rt.spec, rt.schema, rt.converters, befores))
    except (ValueError, TypeError, pa.ArrowException) as exc:
        good = []
        for i, ev in enumerate(evs):  # find the bad ones
            try:
                rows_to_arrow(rt.spec, rt.schema, rt.converters, [ev.image])
                if befores is not None:
                    rows_to_arrow(rt.spec, rt.schema, rt.converters, [befores[i]])
                good.append(ev)
            except (ValueError, TypeError, pa.ArrowException) as one:
                bad(ev, f"cannot decode for {rt.name}: {one}")
        if len(good) == len(evs):
            raise MergerError(f"cannot decode a batch of {rt.name}: {exc}") from None
        return decode(good, rt, bad, extra)
    keys = list(zip(*[table.column(k).to_pylist() for k in rt.keys]))
    return Decoded(evs, table, keys)
