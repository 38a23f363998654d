"""The JVM class-data archive (AppCDS) that makes a local Spark start faster.

Starting Spark loads and verifies ~15k classes from jars: most of the JVM's start-up.
Java 17 can dump the classes a run loaded into an archive (``-XX:ArchiveClassesAtExit``)
that later JVMs map instead (``-XX:SharedArchiveFile``). Measured on the developers'
2-core machine: SparkSession ready 4.9 s -> 2.9 s, first SQL job 2.1 s -> 1.0 s.

The archive belongs to one Java and one Spark installation: its file name is a hash of
both, down to each jar's size and modification time, which the JVM checks when it maps
the archive (a reinstalled .venv at the same path, same versions, has new jar times and
would otherwise find an archive the JVM silently refuses). Another installation simply
finds none. ``build`` removes the archives of installations that are gone or replaced.
The JVM checks the archive again when it maps it and ignores one that does not match
(``-Xshare:auto``): the archive can only make a start faster, never change what the
merger does. ``build`` writes it with a short
warm-up run (SQL, Arrow, a Python worker, a streaming micro-batch) in a child process,
to a temporary name renamed into place once the JVM has exited.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from cdc.errors import UserError

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 300


class SparkArchiveError(UserError, RuntimeError):
    """The archive could not be built (no Java, or the warm-up run failed)."""


def cache_dir() -> Path:
    """``$CDC_CACHE_DIR``, else ``$XDG_CACHE_HOME/cdc``, else ``~/.cache/cdc``."""
    if os.environ.get("CDC_CACHE_DIR"):
        return Path(os.environ["CDC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cdc"


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    exe = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return os.path.realpath(exe) if exe and os.path.exists(exe) else None


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def installation_key(java: str, spark_home: Path, spark_version: str) -> str:
    """What the JVM checks when it maps an archive: Java (its binary and its modules
    image) and the jars on Spark's class path, by name, size and modification time."""
    modules = Path(java).parent.parent / "lib" / "modules"
    jars = sorted((p.name, *_stat(p)) for p in (spark_home / "jars").glob("*.jar"))
    java_parts = (java, os.stat(java).st_mtime_ns, _stat(modules) if modules.is_file() else None)
    key = repr((java_parts, str(spark_home), spark_version, jars))
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def archive_path() -> Path | None:
    """Where this installation's archive is (whether or not it exists); None without Java."""
    java = _java()
    if java is None:
        return None
    import pyspark

    key = installation_key(java, _spark_home(), pyspark.__version__)
    return cache_dir() / f"spark-{pyspark.__version__}-{key}.jsa"


def _owner_file(archive: Path) -> Path:
    return archive.with_name(archive.name + ".home")


def remove_stale(keep: Path, spark_home: Path) -> list[Path]:
    """Removes the archives built for ``spark_home`` before (a replaced installation) or for
    a Spark installation that no longer exists; each archive names its Spark in a
    ``.home`` file beside it. Archives without one are left alone."""
    removed = []
    for owner in keep.parent.glob("spark-*.jsa.home"):
        archive = owner.with_name(owner.name[: -len(".home")])
        if archive == keep:
            continue
        home = Path(owner.read_text().strip())
        if home == spark_home or not (home / "jars").is_dir():
            archive.unlink(missing_ok=True)
            owner.unlink(missing_ok=True)
            removed.append(archive)
    return removed


def java_options() -> str:
    """The driver JVM options that map the archive; empty when there is none."""
    path = archive_path()
    if path is None or not path.is_file():
        log.info("no Spark class-data archive (build it with `cdc spark-archive`: the merger starts ~2 s faster)")
        return ""
    # -Xshare:auto: a mismatching archive is ignored; its warnings would only fill the log
    return f"-XX:SharedArchiveFile={path} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def build(force: bool = False) -> Path:
    """Writes the archive if it is missing (or ``force``) and returns its path."""
    path = archive_path()
    if path is None:
        raise SparkArchiveError("no Java found (JAVA_HOME or java on PATH): the archive is made by the JVM")
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    started = time.monotonic()
    try:
        subprocess.run(
            [sys.executable, "-m", "merger.spark.warm_up", str(tmp)],
            check=True,
            timeout=BUILD_TIMEOUT_S,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if not tmp.is_file() or tmp.stat().st_size == 0:
            raise SparkArchiveError("the JVM exited without writing the archive")
        os.replace(tmp, path)
        _owner_file(path).write_text(str(_spark_home()) + "\n")
    except subprocess.CalledProcessError as exc:
        tail = " | ".join(exc.stderr.decode(errors="replace").strip().splitlines()[-3:])
        raise SparkArchiveError(f"the Spark warm-up run that writes the archive failed: {tail}") from exc
    except subprocess.TimeoutExpired as exc:
        raise SparkArchiveError(f"the Spark warm-up run did not end within {BUILD_TIMEOUT_S}s") from exc
    finally:
        tmp.unlink(missing_ok=True)
    log.info("Spark class-data archive written in %.1fs: %s", time.monotonic() - started, path)
    for old in remove_stale(path, _spark_home()):
        log.info("removed the class-data archive of a replaced or removed Spark installation: %s", old)
    return path


if __name__ == "__main__":
    print(build(force="--force" in sys.argv))
