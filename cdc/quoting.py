"""SQL identifier quoting in one place: MariaDB/MySQL and delta-rs predicates use
backticks, PostgreSQL double quotes; an embedded quote character is doubled."""

from __future__ import annotations


def quote_ident(name: str) -> str:
    """A MariaDB/MySQL identifier (also a delta-rs SQL column reference) in backticks."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"an identifier must be a non-empty string, got {name!r}")
    if "\x00" in name:
        raise ValueError(f"an identifier can't contain NUL: {name!r}")
    return "`" + name.replace("`", "``") + "`"


def pg_ident(name: str) -> str:
    """A PostgreSQL identifier in double quotes."""
    return '"' + name.replace('"', '""') + '"'
