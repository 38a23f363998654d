"""Reads of /proc for the tests' and benches' memory probes: a process's status fields,
its children, and the Spark driver JVM a merger process starts."""

from __future__ import annotations

from pathlib import Path


def status(pid: int | None) -> dict[str, int]:
    """VmRSS, VmHWM (KB) and PPid of a process; empty when it is gone or None."""
    out: dict[str, int] = {}
    if not pid:
        return out
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "PPid"):
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def rss_kb(pid: int | None) -> int:
    """A process's resident memory in KB (0 when it is gone or None)."""
    return status(pid).get("VmRSS", 0)


def peak_rss_kb(pid: int | None) -> int:
    """A process's peak resident memory in KB (0 when it is gone or None)."""
    return status(pid).get("VmHWM", 0)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and status(int(p.name)).get("PPid") == pid]


def java_child(pid: int) -> int | None:
    """The JVM a process started (the merger's Spark driver), or None."""
    return next((kid for kid in children(pid) if "java" in cmdline(kid)), None)
