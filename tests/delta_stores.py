"""Where the Delta sink tests keep their tables: a local directory (tests/unit) or an
``s3://`` prefix on the local stack's S3 server, moto (tests/integration): the same test
functions run on both (tests/integration/test_delta_object_store.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

from cdc import stack as local_stack
from cdc.object_store import credentials_from, storage_options


class LocalDeltaStore:
    options = None

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory

    def base(self) -> str:
        return str(self.tmp_path_factory.mktemp("delta"))

    def sink(self, base: str | Path | None = None, **kwargs):
        from merger.sinks.delta import DeltaSink

        return DeltaSink(str(base) if base else self.base(), storage_options=self.options, **kwargs)

    def table(self, path: str):
        from deltalake import DeltaTable

        return DeltaTable(path, storage_options=self.options)


class S3DeltaStore(LocalDeltaStore):
    """A fresh prefix of the stack's bucket per base, on the real moto server process."""

    def __init__(self, s3: local_stack.S3Info):
        self.s3 = s3
        self.options = s3_options(s3)

    def base(self) -> str:
        return f"s3://{self.s3.bucket}/t{uuid.uuid4().hex[:10]}"


def s3_options(s3: local_stack.S3Info) -> dict:
    """What a merger's config with ``object_store: {endpoint, region, addressing: path,
    allow_http: true}`` and the stack's credentials gives the Delta sink."""
    creds = credentials_from(
        {"AWS_ACCESS_KEY_ID": s3.access_key_id, "AWS_SECRET_ACCESS_KEY": s3.secret_access_key}, "the stack"
    )
    return storage_options(s3.endpoint, s3.region, "path", True, creds)
