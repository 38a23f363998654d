"""Verify's sink side as types: what differs between sinks is asked of each sink's reader
(``merger.verify.sinks.<sink>``, found through ``merger.verify.sinks.registry``), never
decided by testing a sink's name. Read from the source with ``ast``: outside the per-sink
readers and the registry, no verify module (nor ``cdc verify``'s) holds a sink's name as a
string (compared, listed, a key) or reaches for a config section by it (``sinks.delta``)."""

from __future__ import annotations

import ast
from pathlib import Path

from merger.sinks.registry import KINDS as SINK_KINDS
from merger.verify.sinks.registry import KINDS as READER_KINDS

ROOT = Path(__file__).resolve().parents[2]
SINK_NAMES = frozenset(kind.section for kind in SINK_KINDS)
# the sink's own code: its reader, and the registry that maps the names to the readers
OWN = {"merger/verify/sinks/delta.py", "merger/verify/sinks/postgres.py", "merger/verify/sinks/registry.py"}
CHECKED = ("merger/verify", "cdc/cli/verify.py")


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants (prose may name a sink)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def sink_names_in(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """(line, what) for each use of a sink's name in the code: a string constant equal to
    one (outside docstrings; an f-string's text parts are never a whole name) or an
    attribute named like one."""
    tree = ast.parse(source, filename)
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value in SINK_NAMES:
                found.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.Attribute) and node.attr in SINK_NAMES:
            found.append((node.lineno, f".{node.attr}"))
    return found


def checked_files() -> list[Path]:
    out = []
    for name in CHECKED:
        path = ROOT / name
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return [p for p in out if str(p.relative_to(ROOT)) not in OWN]


def test_no_verify_module_outside_the_readers_names_a_sink():
    bad = {}
    for path in checked_files():
        found = sink_names_in(path.read_text(), str(path))
        if found:
            bad[str(path.relative_to(ROOT))] = found
    assert not bad, f"ask the sink's reader (merger.verify.sinks) instead of testing its name: {bad}"


def test_the_check_sees_a_test_of_a_name():
    """The check is not vacuous: each way of branching on a name is found, prose is not."""
    code = '''
"""Reads the delta sink."""
def f(reader, config, rules):
    """delta"""
    if reader.name == "delta":
        pass
    for n in ("postgres", "x"):
        pass
    kinds = {"postgres": 1}
    ok = config.sinks.delta is None
    text = f"sinks.{reader.name}: the delta table"
'''
    found = sink_names_in(code)
    assert [line for line, _ in found] == [5, 7, 9, 10]
    assert sink_names_in('x = "Delta Lake"\ny = "datafusion"\n') == []


def test_the_checked_modules_are_there():
    names = {str(p.relative_to(ROOT)) for p in checked_files()}
    assert {"merger/verify/side.py", "merger/verify/sql_digest.py", "cdc/cli/verify.py"} <= names
    assert all((ROOT / p).exists() for p in OWN)


def test_every_sink_has_a_verify_reader_kind_in_the_same_order():
    """A new sink in ``merger.sinks.registry`` needs its line in verify's registry too: a
    reader, or why verify cannot read it by key range."""
    assert [k.section for k in READER_KINDS] == [k.section for k in SINK_KINDS]
    for kind in READER_KINDS:
        assert (kind.open is None) == (kind.why_not is not None), kind.section


def test_each_reader_carries_its_own_rules():
    from merger.verify.sinks.base import SinkReader

    for kind in READER_KINDS:
        if kind.open is None:
            continue
        reader_class = kind.open.__self__
        assert issubclass(reader_class, SinkReader) and reader_class.name == kind.section
        assert reader_class.digest_key_kinds, kind.section
