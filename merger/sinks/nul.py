"""NUL characters (U+0000) in text, which PostgreSQL cannot store, and the rule that
decides what happens to them (``sinks.postgres.nul_policy``, docs/values.md).

PostgreSQL ``text`` refuses the character itself, ``jsonb`` also its JSON escape
``\\u0000``. MySQL holds both (a VARCHAR may contain CHAR(0); a JSON string may contain
U+0000, written ``\\u0000`` in the JSON text). The rules:

* ``strip`` (default): remove them;
* ``replace``: put U+FFFD (the replacement character) in their place;
* ``pause``: raise :class:`UnstorableValue` naming the table, key and column; the merger
  pauses that table (the others keep flowing).

A NUL in a key column always pauses: stripping or replacing it could give two source
rows the same key. A delete's non-key values are never stored, so they are stripped
whatever the rule.

Vectorised: one ``match_substring`` scan per text column (the cost of the check that was
there before); values are only rewritten, in Arrow, when a NUL is present. The same mask
counts the stored values the rule changed, per column (``merger.sinks.nul_count`` reports
them: strip and replace change values silently otherwise).
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from merger.sinks.base import DELETE_OP, OP, UnstorableValue

POLICIES = ("strip", "replace", "pause")
REPLACEMENT = "\ufffd"
NUL = "\x00"
_ESCAPE = "\\u0000"
# ``\u0000`` preceded by an even number of backslashes (after an odd number, the backslash
# before ``u`` is itself escaped: ``\\u0000`` is the text "\u0000"). RE2 has no look-behind, so the
# character before the run is matched and put back; two escapes in a row need two passes.
_ESCAPE_RE = r"(^|[^\\])((?:\\\\)*)\\u0000"


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"nul_policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    return policy


def _text(col: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """The column as plain string values (JSON extension -> its storage, dictionary ->
    decoded)."""
    typ = col.type
    if isinstance(typ, pa.BaseExtensionType):
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        col = pa.chunked_array([c.storage for c in chunks], type=typ.storage_type)
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, col.type.value_type)
    return col


def nul_mask(col, json: bool = False) -> pa.ChunkedArray | pa.Array:
    """True where the value holds a NUL character (and, for jsonb, its escape)."""
    col = _text(col)
    mask = pc.match_substring(col, NUL)
    if json:
        mask = pc.or_(mask, _json_escape_mask(col))
    return mask


def _json_escape_mask(col):
    cheap = pc.match_substring(col, _ESCAPE)  # a prefilter: the regex runs only if needed
    if not pc.any(cheap).as_py():
        return cheap
    return pc.match_substring_regex(col, _ESCAPE_RE)


def clean(col, policy: str, json: bool = False):
    """The values with every NUL (and, for jsonb, every ``\\u0000`` escape) removed
    (``strip``) or replaced by U+FFFD (``replace``)."""
    col = _text(col)
    char = "" if policy == "strip" else REPLACEMENT
    if pc.any(pc.match_substring(col, NUL)).as_py():
        col = pc.replace_substring(col, NUL, char)
    if json:
        # U+FFFD is written as the character itself, which is valid in a JSON string
        while pc.any(_json_escape_mask(col)).as_py():
            col = pc.replace_substring_regex(col, _ESCAPE_RE, r"\1\2" + char)
    return col


def apply_nul_policy(
    table, changes: pa.Table, keys: Sequence[str], text_columns: Sequence[str], json_columns: Sequence[str], policy: str
) -> tuple[pa.Table, dict[str, int]]:
    """``changes`` (a deduplicated change batch) with the rule applied to its text and
    JSON columns, and per column the number of values the rule changed among those stored
    (a delete's values are not stored: not counted); raises :class:`UnstorableValue` for a
    NUL that must pause the table."""
    changed: dict[str, int] = {}
    if changes.num_rows == 0:
        return changes, changed
    upsert = None
    for name in list(text_columns) + list(json_columns):
        if name not in changes.column_names:
            continue
        json = name in json_columns
        mask = nul_mask(changes[name], json)
        if not pc.any(mask).as_py():
            continue
        if name in keys:
            _refuse(table, changes, keys, name, mask, json, key=True)
        if upsert is None:
            upsert = pc.not_equal(changes[OP], DELETE_OP)
        stored = pc.and_(mask, upsert)
        n = pc.sum(pc.cast(stored, pa.int64())).as_py() or 0
        if n and policy == "pause":
            _refuse(table, changes, keys, name, stored, json, key=False)
        if n:
            changed[name] = n
        cleaned = clean(changes[name], "strip" if policy == "pause" else policy, json)
        i = changes.schema.get_field_index(name)
        changes = changes.set_column(i, pa.field(name, cleaned.type), cleaned)
    return changes, changed


def _refuse(table, changes: pa.Table, keys, column: str, mask, json: bool, key: bool) -> None:
    row = pc.index(mask, True).as_py()
    key_value = {k: changes[k][row].as_py() for k in keys}
    what = (
        "which PostgreSQL jsonb cannot store (neither the character nor its escape \\u0000)"
        if json
        else "which PostgreSQL text cannot store"
    )
    if key:
        raise UnstorableValue(
            f"table {table}: key {key_value}: key column {column!r} holds a NUL character (U+0000), {what}, and "
            f"a key is never stripped or replaced (two source rows could get the same key): the table is "
            f"paused; remove the NUL from the key in the source, then run `cdc snapshot {table}`"
        )
    raise UnstorableValue(
        f"table {table}: key {key_value}: column {column!r} holds a NUL character (U+0000), {what} "
        f"(sinks.postgres.nul_policy: pause): the table is paused; to go on, either set "
        f"sinks.postgres.nul_policy to strip or replace, restart the merger and run `cdc resume {table}`, "
        f"or remove the NUL in the source and run `cdc snapshot {table}`"
    )
