"""Generates docs/configuration.md from the configuration models (`python -m cdc.docgen`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, get_args, get_origin

from pydantic import BaseModel

from cdc.config import IngestConfig, MergerConfig

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "configuration.md"
# hand-written sections appended verbatim (options that are not configuration keys)
INCLUDES = (ROOT / "docs" / "kafka_source.md",)


def _type_name(annotation) -> str:
    origin = get_origin(annotation)
    if origin is Annotated:  # a tagged union of models (a table's mode): its tags
        members = get_args(get_args(annotation)[0])
        tags = [repr(get_args(m.model_fields["mode"].annotation)[0]) for m in members if "mode" in m.model_fields]
        return "{mode: " + " \\| ".join(tags) + ", ...}"
    if origin is None:
        return getattr(annotation, "__name__", str(annotation))
    args = [a for a in get_args(annotation) if a is not type(None)]
    if str(origin).endswith("Literal"):
        return " \\| ".join(repr(a) for a in get_args(annotation))
    if len(args) == 1 and len(get_args(annotation)) == 2:
        return _type_name(args[0]) + " (optional)"
    return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        annotation = field.annotation
        inner = [a for a in (get_args(annotation) or (annotation,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if inner:
            rows += _rows(inner[0], key + ".")
            continue
        default = field.default if field.default_factory is None else field.default_factory()
        default = "required" if field.is_required() else f"`{default!r}`"
        rows.append(f"| `{key}` | {_type_name(annotation)} | {default} | {field.description or ''} |")
    return rows


def render() -> str:
    out = [
        "# Configuration reference",
        "",
        "Generated from the configuration models in `cdc/config.py` and "
        + ", ".join(f"`docs/{p.name}`" for p in INCLUDES)
        + " by `python -m cdc.docgen`; do not edit by hand.",
        "",
        "Each process reads one YAML file (`-c FILE`). Secrets are never written in the file: "
        "`*_env` names an environment variable, `*_file` a file that holds the secret.",
        "",
    ]
    for title, model in (("ingest (`cdc ingest`)", IngestConfig), ("merger (`cdc merge`)", MergerConfig)):
        out += [
            f"## {title}",
            "",
            (model.__doc__ or "").strip(),
            "",
            "| key | type | default | meaning |",
            "|---|---|---|---|",
            *_rows(model),
            "",
        ]
    for path in INCLUDES:
        out += [path.read_text().rstrip("\n"), ""]
    return "\n".join(out)


if __name__ == "__main__":
    TARGET.parent.mkdir(exist_ok=True)
    TARGET.write_text(render())
    print(f"wrote {TARGET}", file=sys.stderr)
