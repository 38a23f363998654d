"""The class-data archive's location and JVM options (merger/spark/archive.py); no JVM runs."""

import os
from pathlib import Path

import pytest

from merger.spark import archive as spark_archive


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CDC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_archive_lives_in_the_cache_dir_named_after_spark(cache):
    path = spark_archive.archive_path()
    assert path is not None and path.parent == cache
    assert path.name.startswith("spark-") and path.suffix == ".jsa"
    assert spark_archive.archive_path() == path  # stable for one installation


def test_cache_dir_defaults_to_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("CDC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert spark_archive.cache_dir() == tmp_path / "xdg" / "cdc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert spark_archive.cache_dir() == tmp_path / "home" / ".cache" / "cdc"


def test_another_java_gets_another_archive(cache, monkeypatch, tmp_path):
    default = spark_archive.archive_path()
    other = tmp_path / "jdk" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert spark_archive.archive_path() not in (None, default)


def test_without_java_there_is_no_archive_and_building_says_why(cache, monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert spark_archive.archive_path() is None
    assert spark_archive.java_options() == ""
    with pytest.raises(spark_archive.SparkArchiveError, match="no Java found"):
        spark_archive.build()


def test_options_map_the_archive_only_when_it_exists(cache):
    assert spark_archive.java_options() == ""
    path = spark_archive.archive_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not checked here: the JVM checks it")
    options = spark_archive.java_options().split()
    assert f"-XX:SharedArchiveFile={path}" in options
    assert "-Xshare:auto" in options  # a bad archive is ignored, never fatal


def test_an_existing_archive_is_not_built_again(cache, monkeypatch):
    path = spark_archive.archive_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x")
    monkeypatch.setattr(spark_archive.subprocess, "run", lambda *a, **k: pytest.fail("built again"))
    assert spark_archive.build() == path


def _spark_home(root: Path, jars: dict[str, bytes]) -> Path:
    (root / "jars").mkdir(parents=True)
    for name, data in jars.items():
        (root / "jars" / name).write_bytes(data)
    return root


def test_a_reinstalled_jar_with_the_same_size_gets_another_archive(tmp_path):
    # the JVM refuses an archive whose class-path jars have other modification times
    # (a .venv made again at the same path): the key must change with them
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    home = _spark_home(tmp_path / "spark", {"a.jar": b"aaaa", "b.jar": b"bbbb"})
    key = spark_archive.installation_key(str(java), home, "4.3.0")
    assert spark_archive.installation_key(str(java), home, "4.3.0") == key
    st = (home / "jars" / "b.jar").stat()
    os.utime(home / "jars" / "b.jar", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    touched = spark_archive.installation_key(str(java), home, "4.3.0")
    assert touched != key
    (home / "jars" / "b.jar").write_bytes(b"bbbbb")
    assert spark_archive.installation_key(str(java), home, "4.3.0") not in (key, touched)
    # Java's modules image is checked too (a JDK update)
    modules = tmp_path / "jdk" / "lib" / "modules"
    modules.parent.mkdir(parents=True)
    modules.write_bytes(b"m")
    with_modules = spark_archive.installation_key(str(java), home, "4.3.0")
    modules.write_bytes(b"mm")
    assert spark_archive.installation_key(str(java), home, "4.3.0") != with_modules


def test_building_removes_the_archives_of_replaced_and_removed_installations(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    here = _spark_home(tmp_path / "here", {"a.jar": b"a"})
    elsewhere = _spark_home(tmp_path / "elsewhere", {"a.jar": b"a"})

    def archive(name: str, home: Path | None) -> Path:
        path = cache / f"spark-4.3.0-{name}.jsa"
        path.write_bytes(b"jsa")
        if home is not None:
            (cache / f"{path.name}.home").write_text(f"{home}\n")
        return path

    new = archive("new", here)
    replaced = archive("old", here)  # the same path, an earlier install
    other = archive("other", elsewhere)  # another live installation
    gone = archive("gone", tmp_path / "deleted-venv")
    unowned = archive("unowned", None)  # made before archives named their Spark
    removed = spark_archive.remove_stale(new, here)
    assert sorted(removed) == sorted([replaced, gone])
    assert not replaced.exists() and not gone.exists()
    assert not (cache / f"{replaced.name}.home").exists()
    assert new.exists() and other.exists() and unowned.exists()
