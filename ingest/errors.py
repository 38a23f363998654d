"""Ingest's fatal, user-facing error."""

from __future__ import annotations

from cdc.errors import UserError


class IngestError(UserError, RuntimeError):
    """Fatal, user-facing error (one line)."""
