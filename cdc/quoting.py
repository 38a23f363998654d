"""SQL identifier quoting in one place: MariaDB/MySQL and delta-rs predicates use
backticks, PostgreSQL double quotes; an embedded quote character is doubled. And the one
MariaDB text literal for SQL that must stay text (``text_literal``)."""

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


def text_literal(text: str) -> str:
    """A text as a MariaDB string literal that means the same under every sql_mode (with or
    without NO_BACKSLASH_ESCAPES, ANSI_QUOTES): ``_utf8mb4 X'..'``, its UTF-8 bytes in hex
    with a character set introducer. No escapes, so no value can end it early; a character
    string of derivation COERCIBLE like a quoted literal, so a column compared with it keeps
    its collation (``merger.snapshot.chunking.sql_literal``). For SQL that cannot take
    parameters only (Spark JDBC predicates, ConnectorX queries)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"a text literal must be valid Unicode, got {text!r}") from None
    return "_utf8mb4 X'" + data.hex().upper() + "'"
