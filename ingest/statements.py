"""What a QUERY event inside the binlog is: transaction control or a statement.

MariaDB writes, as QUERY events: ``BEGIN``/``START TRANSACTION`` at the start of a group,
``COMMIT`` at the end of a group of non-transactional changes (an XID event ends a
transactional one), ``SAVEPOINT x`` (only when the transaction's cache already holds
changes), ``ROLLBACK TO x`` (only when a non-transactional change after the savepoint kept
the rolled-back rows in the cache: the row events between ``SAVEPOINT x`` and
``ROLLBACK TO x`` are in the binlog and did NOT happen), ``ROLLBACK``, and the XA
statements (``XA START``/``XA END``/``XA PREPARE`` around the rows of a prepared XA
transaction, ``XA COMMIT``/``XA ROLLBACK`` in a later group of their own). Anything else is
a statement (DDL, or something ingest does not need).

Pure: no I/O, tested in tests/test_statements.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BEGIN, COMMIT, ROLLBACK = "BEGIN", "COMMIT", "ROLLBACK"
SAVEPOINT, ROLLBACK_TO, RELEASE = "SAVEPOINT", "ROLLBACK_TO", "RELEASE"
XA_START, XA_END, XA_PREPARE, XA_COMMIT, XA_ROLLBACK = "XA_START", "XA_END", "XA_PREPARE", "XA_COMMIT", "XA_ROLLBACK"
STATEMENT = "STATEMENT"

_IDENT = r"(`(?:[^`]|``)*`|[^\s;]+)"
_LEADING = re.compile(r"^(?:\s+|/\*(?!!).*?\*/|--[^\n]*\n|#[^\n]*\n)*", re.S)
_RULES = [
    (re.compile(r"(?:BEGIN(?:\s+WORK)?|START\s+TRANSACTION\b.*)\s*;?\s*$", re.I | re.S), BEGIN),
    (re.compile(r"COMMIT(?:\s+WORK)?\s*;?\s*$", re.I), COMMIT),
    (re.compile(r"ROLLBACK(?:\s+WORK)?\s*;?\s*$", re.I), ROLLBACK),
    (re.compile(rf"ROLLBACK\s+(?:WORK\s+)?TO\s+(?:SAVEPOINT\s+)?{_IDENT}\s*;?\s*$", re.I), ROLLBACK_TO),
    (re.compile(rf"RELEASE\s+SAVEPOINT\s+{_IDENT}\s*;?\s*$", re.I), RELEASE),
    (re.compile(rf"SAVEPOINT\s+{_IDENT}\s*;?\s*$", re.I), SAVEPOINT),
    (re.compile(r"XA\s+(?:START|BEGIN)\s+(.*?)\s*;?\s*$", re.I | re.S), XA_START),
    (re.compile(r"XA\s+END\s+(.*?)\s*;?\s*$", re.I | re.S), XA_END),
    (re.compile(r"XA\s+PREPARE\s+(.*?)\s*;?\s*$", re.I | re.S), XA_PREPARE),
    (re.compile(r"XA\s+COMMIT\s+(.*?)\s*;?\s*$", re.I | re.S), XA_COMMIT),
    (re.compile(r"XA\s+ROLLBACK\s+(.*?)\s*;?\s*$", re.I | re.S), XA_ROLLBACK),
]
_ONE_PHASE = re.compile(r"\s+ONE\s+PHASE$", re.I)


@dataclass(frozen=True)
class Statement:
    kind: str
    name: str | None = None  # savepoint name (unquoted) or XA xid (as written)
    one_phase: bool = False  # XA COMMIT ... ONE PHASE

    @property
    def ends_group(self) -> bool:
        """The last event of a binlog event group (a GTID starts the next one)."""
        return self.kind in (COMMIT, ROLLBACK, XA_PREPARE, XA_COMMIT, XA_ROLLBACK)


def _unquote(name: str) -> str:
    if name.startswith("`") and name.endswith("`") and len(name) >= 2:
        return name[1:-1].replace("``", "`")
    return name


def classify(query: str) -> Statement:
    text = _LEADING.sub("", query, count=1)
    for pattern, kind in _RULES:
        m = pattern.match(text)
        if m is None:
            continue
        if kind in (SAVEPOINT, ROLLBACK_TO, RELEASE):
            return Statement(kind, _unquote(m.group(1)))
        if kind.startswith("XA_"):
            xid = m.group(1)
            one_phase = kind == XA_COMMIT and bool(_ONE_PHASE.search(xid))
            xid = _ONE_PHASE.sub("", xid).strip()
            if kind == XA_END:
                xid = re.sub(r"\s+(?:SUSPEND(?:\s+FOR\s+MIGRATE)?)$", "", xid, flags=re.I)
            return Statement(kind, xid, one_phase)
        return Statement(kind)
    return Statement(STATEMENT)
