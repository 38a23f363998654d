"""Delta tables on an S3-compatible object store: the delta-rs storage options of an
``s3://bucket/prefix`` path (pure), and the credentials they carry.

Credentials come only from the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``) or from a file named in the config (``NAME=value`` lines of the same
names); never from the YAML. They are held as ``SecretStr``, and the options handed to
delta-rs are a :class:`StorageOptions` whose ``repr`` hides them.

Commits are made with S3's conditional writes (``conditional_put: etag``): a Delta commit
``_delta_log/<n>.json`` is created only if no other writer created it first, so two writers
never overwrite each other's commit; the loser sees a conflict and reads the table again.
``AWS_S3_ALLOW_UNSAFE_RENAME`` (commits by a plain overwrite, unsafe with two writers) is
set to false even if the environment says otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlparse

from pydantic import SecretStr

CREDENTIAL_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
SECRET_NAMES = frozenset({"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"})
DEFAULT_REGION = "us-east-1"
# object_store's client retries: bounded, so that a store that is down is reported (and then
# waited for by the merger's sink retries) rather than hidden in minutes of backoff
DEFAULT_REQUEST_TIMEOUT_S = 60.0
MAX_RETRY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0


def client_options(request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> dict[str, str]:
    """object_store's client settings: a request that gets no answer fails after
    ``request_timeout_s``, and is retried (up to 3 times) only within that time too, so a
    store that hangs is reported (the sink blocked) after about ``request_timeout_s``, not
    after minutes; a store that answers an error at once is retried for up to 30 s."""

    def ms(seconds: float) -> str:
        return f"{max(1, round(seconds * 1000))}ms"

    return {
        "connect_timeout": ms(min(CONNECT_TIMEOUT_S, request_timeout_s)),
        "timeout": ms(request_timeout_s),
        "max_retries": "3",
        "retry_timeout": ms(min(MAX_RETRY_TIMEOUT_S, request_timeout_s)),
    }


def is_object_store(path: str) -> bool:
    return "://" in str(path)


def check_s3_uri(path: str) -> str | None:
    """Why ``path`` is not a usable ``s3://bucket/prefix`` URI (None: it is)."""
    parsed = urlparse(path)
    if parsed.scheme != "s3":
        return f"{path!r}: only s3:// object stores are supported (or a local directory)"
    if not parsed.netloc:
        return f"{path!r}: no bucket (s3://<bucket>/<prefix>)"
    return None


@dataclass(frozen=True)
class Credentials:
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None


def parse_credentials_file(text: str, where: str) -> Credentials:
    """``NAME=value`` lines (blank lines and ``#`` comments skipped; ``export`` allowed)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"^export\s+", "", line)
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or name not in CREDENTIAL_NAMES:
            # never echo the line: it may hold a secret
            raise ValueError(f"{where}, line {number}: expected one of {', '.join(CREDENTIAL_NAMES)}=<value>")
        values[name] = value.strip().strip("'\"")
    return credentials_from(values, where)


def credentials_from(values: dict[str, str], where: str) -> Credentials:
    """The credentials among ``values`` (the environment, or a file's lines): a key id
    and a secret together, or neither (then delta-rs finds its own, e.g. an instance role)."""
    found = {n: values[n] for n in CREDENTIAL_NAMES if values.get(n)}
    if ("AWS_ACCESS_KEY_ID" in found) != ("AWS_SECRET_ACCESS_KEY" in found):
        raise ValueError(f"{where}: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together; one is missing")
    return Credentials(*(SecretStr(found[n]) if n in found else None for n in CREDENTIAL_NAMES))


class StorageOptions(dict):
    """delta-rs storage options whose printed form hides the secrets."""

    def __repr__(self) -> str:
        return repr({k: ("**********" if k in SECRET_NAMES else v) for k, v in self.items()})

    __str__ = __repr__


def storage_options(
    endpoint: str | None,
    region: str | None,
    addressing: str,
    allow_http: bool,
    credentials: Credentials,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> StorageOptions:
    """The options delta-rs (object_store) needs for an S3 path."""
    options = StorageOptions(client_options(request_timeout_s))
    options.update(
        {
            "AWS_REGION": region or DEFAULT_REGION,
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true" if addressing == "virtual" else "false",
            "AWS_ALLOW_HTTP": "true" if allow_http else "false",
            # the safe commit protocol: create-if-absent by ETag, never an unsafe rename
            "conditional_put": "etag",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "false",
        }
    )
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
    for name, value in zip(
        CREDENTIAL_NAMES, (credentials.access_key_id, credentials.secret_access_key, credentials.session_token)
    ):
        if value is not None:
            options[name] = value.get_secret_value()
    return options


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def one_line(text: str, limit: int | None = 400) -> str:
    """An object-store error (delta-rs prints a tree of causes with colour codes) as one line."""
    text = _ANSI.sub("", text).replace("↳", " ")
    return " ".join(text.split())[:limit]
