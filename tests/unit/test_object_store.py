"""Delta tables on an object store: the config (sinks.delta.path s3://, object_store) and the
delta-rs options it gives (cdc/object_store.py); no server needed."""

from __future__ import annotations

import pytest

from cdc.config import ConfigError, DeltaSinkConfig, MergerConfig, load_model
from cdc.object_store import one_line, parse_credentials_file

STORE = {"endpoint": "http://127.0.0.1:9000", "allow_http": True, "addressing": "path"}


def _config(tmp_path, delta: dict):
    import yaml

    path = tmp_path / "merger.yaml"
    path.write_text(yaml.safe_dump({"topic_prefix": "cdc", "sinks": {"delta": delta}}))
    return load_model(MergerConfig, path)


@pytest.mark.parametrize(
    "delta, message",
    [
        ({"path": "gs://b/p"}, "sinks.delta.path: 'gs://b/p': only s3:// object stores are supported"),
        ({"path": "s3:///p"}, "no bucket"),
        ({"path": "/data/delta", "object_store": STORE}, "object_store is for an s3:// path only"),
        ({"path": "s3://b/p", "object_store": {"endpoint": "http://h:1"}}, "is plain http: set object_store.allow_h"),
        ({"path": "s3://b/p", "object_store": {"endpoint": "h:1"}}, "endpoint: must be an http:// or https:// URL"),
        ({"path": "s3://b/p", "object_store": {"addressing": "vhost"}}, "addressing: must be one of"),
        ({"path": "s3://b/p", "object_store": {"secret_access_key": "x"}}, "secret_access_key: unknown key"),
    ],
)
def test_bad_object_store_settings_are_one_line_errors(tmp_path, delta, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as err:
        _config(tmp_path, delta)
    assert "\n" not in str(err.value)


def test_storage_options_commit_safely_and_hide_the_secret(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "t0ken-value")
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")  # never followed
    options = DeltaSinkConfig(path="s3://bucket/prefix", object_store=STORE).storage_options()
    assert options["conditional_put"] == "etag"
    assert options["AWS_S3_ALLOW_UNSAFE_RENAME"] == "false"
    assert options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000" and options["AWS_ALLOW_HTTP"] == "true"
    assert options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "false" and options["AWS_REGION"] == "us-east-1"
    assert options["AWS_SECRET_ACCESS_KEY"] == "s3cr3t-value" and options["AWS_SESSION_TOKEN"] == "t0ken-value"
    for shown in (repr(options), str(options), f"{options}"):
        assert "s3cr3t" not in shown and "t0ken" not in shown
    virtual = DeltaSinkConfig(path="s3://bucket/prefix", object_store={"region": "eu-west-1"}).storage_options()
    assert virtual["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "true" and virtual["AWS_REGION"] == "eu-west-1"
    assert "AWS_ENDPOINT_URL" not in virtual
    assert DeltaSinkConfig(path="/data/delta").storage_options() is None


def test_a_hung_request_fails_after_request_timeout_s_retries_included():
    default = DeltaSinkConfig(path="s3://b/p").storage_options()
    assert (default["timeout"], default["retry_timeout"], default["connect_timeout"]) == (
        "60000ms",
        "30000ms",
        "5000ms",
    )
    short = DeltaSinkConfig(path="s3://b/p", object_store={"request_timeout_s": 2.5}).storage_options()
    assert (short["timeout"], short["retry_timeout"], short["connect_timeout"]) == ("2500ms", "2500ms", "2500ms")
    with pytest.raises(ValueError, match="request_timeout_s"):
        DeltaSinkConfig(path="s3://b/p", object_store={"request_timeout_s": 0})


def test_credentials_file(tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    creds = tmp_path / "s3.env"
    creds.write_text("# local\nexport AWS_ACCESS_KEY_ID=key\nAWS_SECRET_ACCESS_KEY='from file'\n")
    cfg = DeltaSinkConfig(path="s3://b/p", object_store={"credentials_file": str(creds)})
    assert cfg.storage_options()["AWS_SECRET_ACCESS_KEY"] == "from file"
    assert "from file" not in repr(cfg.object_store.credentials())
    creds.write_text("AWS_ACCESS_KEY_ID=key\nsecret=oops\n")
    with pytest.raises(ConfigError, match="line 2: expected one of") as err:
        cfg.storage_options()
    assert "oops" not in str(err.value)  # a bad line is never echoed: it may hold a secret
    creds.write_text("AWS_ACCESS_KEY_ID=key\n")
    with pytest.raises(ConfigError, match="go together; one is missing"):
        cfg.storage_options()
    missing = DeltaSinkConfig(path="s3://b/p", object_store={"credentials_file": str(tmp_path / "none")})
    with pytest.raises(ConfigError, match="cannot read"):
        missing.storage_options()
    # neither: delta-rs finds its own (an instance role)
    assert "AWS_ACCESS_KEY_ID" not in DeltaSinkConfig(path="s3://b/p").storage_options()
    with pytest.raises(ValueError, match="line 1"):
        parse_credentials_file("nonsense", "f")


def test_an_object_store_error_tree_becomes_one_line():
    text = (
        "Kernel error -> Generic S3 error\n  \x1b[31m↳\x1b[0m Error performing GET\n   \x1b[31m↳\x1b[0m error sending"
    )
    assert one_line(text) == "Kernel error -> Generic S3 error Error performing GET error sending"


def test_a_timeout_deep_in_a_long_store_error_is_a_sink_unavailable():
    """A MERGE's read of a data file from a store that hangs: delta-rs's error names the file
    and the request first, the timeout only after 400 characters (seen with moto frozen)."""
    from merger.sinks.base import SinkUnavailable
    from merger.sinks.delta import DeltaSink

    sink = DeltaSink("s3://cdc/t1659e7d3")
    file = "t1659e7d3/s3h_t1659e7d3/items/part-00000-2a23c608-2744-417f-9bc4-4e7dd81859da-c000.snappy.parquet"
    exc = OSError(
        f"Generic DeltaTable error: Parquet error: Parquet error: Failed to fetch metadata for file {file}: "
        f"Object Store error: Generic S3 error: Error performing GET http://127.0.0.1:38451/cdc/{file} in "
        "5.001145427s - HTTP error\n  ↳ error sending request\n   ↳ operation timed out"
    )
    assert str(exc).index("sending request") > 400
    err = sink.handles.io_error(exc, "s3://cdc/t1659e7d3/s3h_t1659e7d3/items")
    assert isinstance(err, SinkUnavailable) and "is unreachable" in str(err) and len(str(err)) < 500
    # the reply's body broke off mid-read (seen in CI with moto frozen after its headers)
    body = OSError(
        f"Generic DeltaTable error: Parquet error: Parquet error: Failed to fetch metadata for file {file}: "
        "Object Store error: Generic S3 error: HTTP error: request or response body error"
    )
    assert isinstance(sink.handles.io_error(body, "s3://cdc/t1659e7d3/s3h_t1659e7d3/items"), SinkUnavailable)
    other = sink.handles.io_error(OSError("Generic S3 error: Access Denied"), "s3://b/p/db/items")
    assert not isinstance(other, SinkUnavailable) and "Access Denied" in str(other)
