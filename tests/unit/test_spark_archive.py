"""The class-data archive's location and JVM options (merger/spark_archive.py); no JVM runs."""

from pathlib import Path

import pytest

from merger import spark_archive


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
