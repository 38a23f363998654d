"""Ingest's fatal, user-facing error."""

from __future__ import annotations


class IngestError(RuntimeError):
    """Fatal, user-facing error (one line)."""
