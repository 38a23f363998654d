"""Figures of Spark's streaming progress, read from the JVM's objects field by field.

pyspark's ``query.lastProgress`` / ``recentProgress`` turn whole progress reports into
Python: the report's JSON made in the JVM, parsed, and each source's offsets encoded again.
With 1,500 partitions that is ~0.1 s a report, with the driver's GIL held while batches
run (issue 23: the once-a-second slow-batch check, and the progress log's 100 reports,
took 38 % of the driver at 500 tables). Here only the fields asked for cross Py4J.
Without the JVM objects (Spark Connect) the public properties are used."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BatchTimes:
    batch_id: int
    timestamp: str | None = None
    num_input_rows: int | None = None
    duration_ms: dict[str, int] = field(default_factory=dict)


def _java_query(query) -> Any:
    return getattr(query, "_jsq", None)


def parse_durations(text: str) -> dict[str, int]:
    """A progress report's ``durationMs`` from the Java map's text, ``{addBatch=314,
    walCommit=8}``: one Py4J call. Iterating the map over Py4J costs a call per key, and
    its end is a Java exception that pyspark converts with some 50 class lookups."""
    out: dict[str, int] = {}
    for item in text.strip().strip("{}").split(","):
        key, sep, value = item.partition("=")
        if sep and value.strip().lstrip("-").isdigit():
            out[key.strip()] = int(value)
    return out


def _times(jp, with_durations: bool = True) -> BatchTimes:
    durations = parse_durations(str(jp.durationMs().toString())) if with_durations else {}
    return BatchTimes(int(jp.batchId()), str(jp.timestamp()), int(jp.numInputRows()), durations)


def _from_dict(progress: dict) -> BatchTimes:
    return BatchTimes(
        progress.get("batchId", -1),
        progress.get("timestamp"),
        progress.get("numInputRows"),
        dict(progress.get("durationMs") or {}),
    )


def last_batch(query) -> BatchTimes | None:
    """The last progress report's batch id, time, input rows and time split (None before one)."""
    jsq = _java_query(query)
    if jsq is None:
        progress = query.lastProgress
        return None if not progress else _from_dict(progress)
    jp = jsq.lastProgress()
    return None if jp is None else _times(jp)


def last_batch_id(query) -> int | None:
    """The last progress report's batch id: one Py4J call."""
    jsq = _java_query(query)
    if jsq is None:
        progress = query.lastProgress
        return None if not progress else progress.get("batchId")
    jp = jsq.lastProgress()
    return None if jp is None else int(jp.batchId())


def batches_after(query, seen: int) -> list[BatchTimes]:
    """The kept progress reports of batches after ``seen``, oldest first."""
    jsq = _java_query(query)
    if jsq is None:
        return [_from_dict(p) for p in query.recentProgress if p.get("batchId", -1) > seen]
    reports = jsq.recentProgress()
    out: list[BatchTimes] = []
    for i in range(len(reports) - 1, -1, -1):
        jp = reports[i]
        if int(jp.batchId()) <= seen:
            break
        out.append(_times(jp))
    out.reverse()
    return out


def source_offsets(query) -> list[tuple[str | None, str | None]]:
    """``(endOffset, latestOffset)`` of each source in the last progress report, as the
    sources' JSON text (None where a source reports none); empty before the first report."""
    jsq = _java_query(query)
    if jsq is None:
        progress = query.lastProgress
        sources = progress["sources"] if progress else []
        return [(s["endOffset"], s["latestOffset"]) for s in sources]
    jp = jsq.lastProgress()
    if jp is None:
        return []
    out = []
    for s in jp.sources():
        end, latest = s.endOffset(), s.latestOffset()
        out.append((None if end is None else str(end), None if latest is None else str(latest)))
    return out
