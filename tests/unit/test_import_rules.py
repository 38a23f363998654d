"""The code's import rules (the developers' guide): no import circles between modules, and
no private name (``_x``) imported from another module. Read from the source with ``ast``
(imports inside functions and under TYPE_CHECKING count too). The offenders of today are
listed below; the test fails on a new one and on a listed one that is gone (then take it
off the list), so the lists only shrink. docs/history.md ("Design of the sink modes") plans
the sink packages that remove the sinks' entries."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("merger", "cdc", "ingest")

KNOWN_CIRCLES: set[frozenset[str]] = set()  # none left
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str, str]] = set()  # none left


def module_files() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports(modules: dict[str, Path]) -> tuple[dict[str, set[str]], set[tuple[str, str, str]]]:
    """Each module's imported modules of the project, and the private names it imports
    from another module: (importer, module, name)."""

    def owner(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    private: set[tuple[str, str, str]] = set()
    for name, path in modules.items():
        found = edges.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(t for a in node.names if (t := owner(a.name)) and t != name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                for a in node.names:
                    target = f"{base}.{a.name}" if f"{base}.{a.name}" in modules else owner(base)
                    if not target or target == name:
                        continue
                    found.add(target)
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.add((name, target, a.name))
    return edges, private


def circles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    members.add(m)
                    if m == node:
                        break
                if len(members) > 1:
                    found.add(frozenset(members))
    return found


def test_no_new_import_circle():
    found = circles(imports(module_files())[0])
    new = sorted(sorted(c) for c in found - KNOWN_CIRCLES)
    gone = sorted(sorted(c) for c in KNOWN_CIRCLES - found)
    assert not new, f"import circle(s) between modules: {new} (import one way only; see docs/architecture.md)"
    assert not gone, f"circle(s) no longer there, take them off KNOWN_CIRCLES: {gone}"


def test_no_new_private_import():
    found = imports(module_files())[1]
    new = sorted(found - KNOWN_PRIVATE_IMPORTS)
    gone = sorted(KNOWN_PRIVATE_IMPORTS - found)
    assert not new, f"private name(s) imported from another module (make them public, named for what they are): {new}"
    assert not gone, f"no longer imported, take them off KNOWN_PRIVATE_IMPORTS: {gone}"


def test_the_checks_find_what_they_look_for():
    """A circle and a private import in made-up modules are found (the test can fail)."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == {frozenset({"a", "b", "c"})}
    assert circles({"a": {"b"}, "b": set()}) == set()


def test_private_and_nested_imports_are_found(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from b import _hidden, shown\n")
    (tmp_path / "b.py").write_text("import a\n_hidden = shown = 1\n")
    edges, private = imports({"a": tmp_path / "a.py", "b": tmp_path / "b.py"})
    assert private == {("a", "b", "_hidden")}
    assert circles(edges) == {frozenset({"a", "b"})}


def test_the_merger_imports_nothing_from_ingest():
    """What both need (the table model, information_schema, the tableChanges JSON, the wire
    format) lives in ``cdc``; the merger never depends on ingest's code."""
    edges = imports(module_files())[0]
    crossing = sorted(
        (m, t) for m, targets in edges.items() if m.startswith("merger") for t in targets if t.startswith("ingest")
    )
    assert not crossing, f"merger modules importing ingest: {crossing}"
