"""The import layers: cdc/ outside cdc/cli/ (configuration, errors, quoting, the wire
contract, the table model, the DDL kinds, the local stack) is the bottom layer; ingest/ never imports merger/;
the merger reads only the parts of ingest/ that define what ingest writes."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# what the merger may take from ingest (the table model, the DDL kinds and the partitioner
# are in cdc/, shared)
MERGER_MAY_IMPORT = {
    "ingest.codec",  # a TableSpec from information_schema (the merger reads the source too)
    "ingest.schema_change_records",  # Debezium's tableChanges JSON (the Debezium-topics mode)
}


def imports_of(package: str) -> dict[str, set[str]]:
    """module path -> the project modules it imports (anywhere in the file)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        out[str(path.relative_to(ROOT))] = {n for n in names if n.split(".")[0] in ("cdc", "ingest", "merger")}
    return out


def test_the_bottom_layer_imports_no_pipeline_and_no_command():
    bad = {
        path: sorted(n for n in names if n.split(".")[0] in ("ingest", "merger") or n.startswith("cdc.cli"))
        for path, names in imports_of("cdc").items()
        if not path.startswith("cdc/cli/")
    }
    assert not {p: n for p, n in bad.items() if n}


def test_ingest_never_imports_the_merger_or_the_commands():
    bad = {
        path: sorted(n for n in names if n.startswith("merger") or n.startswith("cdc.cli"))
        for path, names in imports_of("ingest").items()
    }
    assert not {p: n for p, n in bad.items() if n}


def test_the_merger_takes_from_ingest_only_the_table_model_and_the_wire_format():
    bad = {
        path: sorted(
            n for n in names if n.startswith("ingest") and n not in MERGER_MAY_IMPORT or n.startswith("cdc.cli")
        )
        for path, names in imports_of("merger").items()
    }
    assert not {p: n for p, n in bad.items() if n}


def test_the_check_sees_a_forbidden_import(tmp_path, monkeypatch):
    """The checks above are not vacuous: a merger import in ingest is found."""
    (tmp_path / "ingest").mkdir()
    (tmp_path / "ingest" / "x.py").write_text("def f():\n    from merger.app import Merger\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert imports_of("ingest") == {"ingest/x.py": {"merger.app"}}
