"""The Prometheus endpoint of a process (ingest or the merger), started once."""

from __future__ import annotations

from prometheus_client import start_http_server

_started = False


def serve(port: int, address: str = "127.0.0.1") -> None:
    """Serves the process's metrics on ``address:port``; 0 turns it off."""
    global _started
    if port and not _started:
        start_http_server(port, addr=address)
        _started = True
