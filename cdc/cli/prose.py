"""Help texts as prose: a docstring's own line breaks joined, so ``cdc --help`` wraps
sentences to the terminal instead of cutting them where the source file did. Paragraphs
(blank lines) and list items (lines starting with ``*``, ``-`` or a digit and ``.``) stay
apart. Pure."""

from __future__ import annotations

import inspect
import re

import typer

_ITEM = re.compile(r"^\s*(?:[*-]|\d+\.)\s")


def prose(doc: str | None) -> str | None:
    """``doc`` with the line breaks inside each paragraph and list item joined by a space."""
    if doc is None:
        return None
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.split("\n"):
            if lines and not _ITEM.match(line):
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def as_prose(app: typer.Typer) -> None:
    """Every command's and group's help in ``app`` (and its sub-apps) made prose."""
    for command in app.registered_commands:
        command.help = prose(command.help or inspect.getdoc(command.callback))
    for group in app.registered_groups:
        sub = group.typer_instance
        if sub is not None:
            sub.info.help = prose(sub.info.help if isinstance(sub.info.help, str) else None)
            as_prose(sub)
