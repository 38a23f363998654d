"""Configuration: one YAML file per process plus environment variables.

Secrets (passwords, SASL secrets) are never read from the YAML file itself: they come
from an environment variable or a file named in the config (``password_env`` /
``password_file``), and they are held as ``SecretStr`` so they never appear in logs,
status output or error messages.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from cdc.errors import UserError
from cdc.routes import Route, Routes


class ConfigError(UserError, ValueError):
    """Invalid configuration; the message is one line naming the key and what is allowed."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def _read_secret(env: str | None, file: str | None, what: str) -> SecretStr | None:
    if env:
        if env not in os.environ:
            raise ConfigError(f"{what}: environment variable {env} is not set")
        return SecretStr(os.environ[env])
    if file:
        try:
            return SecretStr(Path(file).read_text().rstrip("\n"))
        except OSError as exc:
            raise ConfigError(f"{what}: cannot read secret file {file}: {exc.strerror}") from None
    return None


def _check_regexes(cls, value: list[str]) -> list[str]:
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
    return value


def _check_qualified(cls, value: str) -> str:
    if value.count(".") != 1:
        raise ValueError("must be <database>.<table>")
    return value


class MySQLConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    user: str = "cdc"
    password_env: str | None = Field(None, description="environment variable holding the password")
    password_file: str | None = Field(None, description="file holding the password")
    ssl_mode: Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"] | None = Field(
        None,
        description="TLS to the server, as MySQL's --ssl-mode; default: verify_ca with ssl_ca, "
        "required with only ssl_cert, else preferred (TLS if the server offers it, "
        "unverified; Spark JDBC: none)",
    )
    ssl_ca: str | None = Field(None, description="CA file (PEM) that signed the server's certificate")
    ssl_cert: str | None = Field(None, description="client certificate (PEM), for pymysql and the binlog reader")
    ssl_key: str | None = Field(None, description="client private key (PEM)")
    ssl_key_password_env: str | None = Field(None, description="environment variable with the key's password")
    ssl_key_password_file: str | None = None
    ssl_keystore: str | None = Field(
        None,
        description="client certificate and key as a PKCS12/JKS keystore, for Spark JDBC "
        "(MariaDB Connector/J does not read PEM keys)",
    )
    ssl_keystore_password_env: str | None = None
    ssl_keystore_password_file: str | None = None
    connect_timeout_s: float = Field(10.0, gt=0)

    def password(self) -> SecretStr:
        return _read_secret(self.password_env, self.password_file, "mysql.password") or SecretStr("")

    def effective_ssl_mode(self) -> str:
        return self.ssl_mode or ("verify_ca" if self.ssl_ca else "required" if self.ssl_cert else "preferred")

    def ssl(self) -> dict | None:
        """pymysql's ``ssl`` argument (None: pymysql's default, TLS if offered, unverified)."""
        mode = self.effective_ssl_mode()
        if mode in ("disabled", "preferred"):
            return None
        out: dict[str, Any] = {"verify_mode": mode != "required", "check_hostname": mode == "verify_identity"}
        if self.ssl_ca:
            out["ca"] = self.ssl_ca
        if self.ssl_cert:
            out["cert"] = self.ssl_cert
        if self.ssl_key:
            out["key"] = self.ssl_key
        secret = _read_secret(self.ssl_key_password_env, self.ssl_key_password_file, "mysql.ssl_key_password")
        if secret is not None:
            out["password"] = secret.get_secret_value()
        return out

    def connect_kwargs(self) -> dict[str, Any]:
        """pymysql.connect() arguments (also used for the binlog reader's connections)."""
        kw: dict[str, Any] = dict(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password().get_secret_value(),
            connect_timeout=int(self.connect_timeout_s),
        )
        if self.effective_ssl_mode() == "disabled":
            kw["ssl_disabled"] = True
        ssl = self.ssl()
        if ssl:
            kw["ssl"] = ssl
        return kw

    def jdbc_ssl_params(self) -> str:
        """MariaDB Connector/J URL parameters for the TLS settings ("" without TLS)."""
        mode = self.effective_ssl_mode()
        if mode in ("disabled", "preferred"):
            return ""
        params = ["useSsl=true"]
        if mode == "required":
            params.append("trustServerCertificate=true")
        else:
            if self.ssl_ca:
                params.append(f"serverSslCert={self.ssl_ca}")
            if mode == "verify_ca":
                params.append("disableSslHostnameVerification=true")
        if self.ssl_keystore:
            params.append(f"keyStore={self.ssl_keystore}")
        return "&" + "&".join(params)

    def jdbc_secret_properties(self) -> dict[str, str]:
        """Secrets for Spark JDBC: passed as connection properties (Spark redacts keys named
        like *password* in plans and logs), never in the URL."""
        props = {"user": self.user, "password": self.password().get_secret_value()}
        secret = _read_secret(
            self.ssl_keystore_password_env, self.ssl_keystore_password_file, "mysql.ssl_keystore_password"
        )
        if secret is not None:
            props["keyStorePassword"] = secret.get_secret_value()
        return props


#: librdkafka properties that hold secrets: only from *_env / *_file keys, never from ``extra``
KAFKA_SECRET_PROPERTIES = {
    "sasl.password": "sasl_password",
    "ssl.key.password": "ssl_key_password",
    "ssl.keystore.password": "ssl_keystore_password",
}
SPARK_AUTH_SECRET = "spark.authenticate.secret"  # from spark_auth_secret_env/_file only
_KAFKA_SECRET_WORDS = re.compile(r"password|secret|ssl\.key\.pem", re.I)


class KafkaConfig(_Model):
    bootstrap_servers: str = "127.0.0.1:9092"
    extra: dict[str, str | int | bool] = Field(
        default_factory=dict,
        description="librdkafka properties passed through to every Kafka client (TLS/SASL: "
        "security.protocol, ssl.ca.location, ssl.certificate.location, ssl.key.location, "
        "sasl.mechanism, sasl.username, ...); no secrets here",
    )
    max_message_bytes: int | None = Field(
        None,
        ge=1000,
        le=1_000_000_000,
        description="ingest: the largest record it may write; default: what the broker reports as "
        "message.max.bytes, else 100 MiB. A larger record stops ingest with an error naming "
        "table, key and size",
    )
    outage_max_s: int = Field(
        0,
        ge=0,
        description="how long ingest and the merger wait for an unreachable broker, retrying and saying so "
        "(logs, metrics), before they stop with one line; 0 = no bound (as for the source: an outage "
        "loses nothing, the source's binlog retention is the real limit)",
    )
    request_timeout_s: float | None = Field(
        None,
        gt=0,
        le=600,
        description="how long one call to the broker may take before the broker counts as unreachable "
        "(then retried, said in the logs and metrics; see outage_max_s): ingest's transaction calls and "
        "flushes (default 30 s), the merger's metadata and offset requests (default 15 s)",
    )
    sasl_password_env: str | None = Field(None, description="environment variable with sasl.password")
    sasl_password_file: str | None = Field(None, description="file holding sasl.password")
    ssl_key_password_env: str | None = Field(None, description="environment variable with ssl.key.password")
    ssl_key_password_file: str | None = None
    ssl_keystore_password_env: str | None = Field(None, description="environment variable with ssl.keystore.password")
    ssl_keystore_password_file: str | None = None

    @field_validator("extra")
    @classmethod
    def _no_secrets(cls, value: dict) -> dict:
        for key in value:
            if _KAFKA_SECRET_WORDS.search(key):
                field = KAFKA_SECRET_PROPERTIES.get(key.lower())
                use = (
                    f"kafka.{field}_env or kafka.{field}_file"
                    if field
                    else "a property file outside the config (not supported for this key)"
                )
                raise ValueError(f"{key} is a secret and is not read from the config file; use {use}")
        return value

    def secret_sources(self) -> dict[str, tuple[str, str]]:
        """librdkafka property -> ("env", variable) or ("file", path), for clients built
        elsewhere (the Spark data source reads them itself, so no secret is in its options)."""
        out = {}
        for prop, field in KAFKA_SECRET_PROPERTIES.items():
            env, file = getattr(self, f"{field}_env"), getattr(self, f"{field}_file")
            if env:
                out[prop] = ("env", env)
            elif file:
                out[prop] = ("file", file)
        return out

    def client_config(self) -> dict[str, Any]:
        """Settings for every confluent-kafka client: bootstrap, ``extra``, and the secrets."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        conf.update(self.extra)
        for prop, field in KAFKA_SECRET_PROPERTIES.items():
            secret = _read_secret(getattr(self, f"{field}_env"), getattr(self, f"{field}_file"), f"kafka.{field}")
            if secret is not None:
                conf[prop] = secret.get_secret_value()
        return conf


class StartPosition(_Model):
    mode: Literal["current", "gtid", "file"] = "current"
    gtid: str | None = Field(None, description="MariaDB GTID position, e.g. 0-1-1234")
    file: str | None = None
    pos: int | None = Field(None, ge=4)


class ShardConfig(_Model):
    """One server of a sharded source (docs/sharding.md)."""

    name: str = Field(description="the shard's name: in each event's source.shard and the origin column")
    mysql: MySQLConfig = Field(description="the shard's server (as `mysql` of a one-server source)")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value):
            raise ValueError("1 to 64 letters, digits, '_' or '-'")
        return value


class RouteConfig(_Model):
    """Physical tables into one logical table (docs/sharding.md, Routes)."""

    match: str = Field(description="regex on the physical db.table, full match (first route that matches wins)")
    to: str = Field(description="the logical db.table; \\1 ... take groups of the match")

    @field_validator("match")
    @classmethod
    def _match(cls, value: str) -> str:
        _check_regexes(cls, [value])
        return value

    @field_validator("to")
    @classmethod
    def _to(cls, value: str) -> str:
        return _check_qualified(cls, value)


def _check_shards(cls, value: list[ShardConfig]) -> list[ShardConfig]:
    names = [s.name for s in value]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ValueError(f"shard names must differ: {', '.join(doubled)} more than once")
    return value


SHARDS_DESCRIPTION = (
    "the servers of a sharded source, read by one ingest (each with its own position); empty: the one server of `mysql`"
)
ROUTES_DESCRIPTION = "physical tables into logical ones: [{match: <regex on db.table>, to: <db.table>}]"
KEY_MODE_DESCRIPTION = (
    "origin: the tables of several origins (shards, routed tables) get the column __cdc_origin in their "
    "key, so equal keys never overwrite each other; unique: the keys are unique across origins (a sharded "
    "keyspace whose key ranges move between shards with `cdc shard move`): __cdc_origin is a plain column "
    "and a key met from two origins pauses its table (docs/sharding.md, section 4)"
)

UNIQUE_NEEDS_ROWS = (
    "key_mode: unique needs a sink that keeps rows (sinks.postgres or sinks.delta): the merger checks each "
    "key's origin against the sink's row, and the Kafka changelog cannot be read back by key"
)


class IngestConfig(_Model):
    """Configuration of one ``cdc ingest`` process (one source server)."""

    topic_prefix: str = Field("cdc", description="Debezium topic.prefix")
    server_id: int = Field(5401, ge=1, le=2**32 - 1, description="replica server id (unique)")
    mysql: MySQLConfig = Field(default_factory=MySQLConfig)
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    start: StartPosition = Field(default_factory=StartPosition)
    database_include: list[str] = Field(default_factory=list, description="regexes, full match")
    database_exclude: list[str] = Field(default_factory=list)
    table_include: list[str] = Field(default_factory=list, description="regexes on db.table")
    table_exclude: list[str] = Field(default_factory=list)
    column_exclude: list[str] = Field(default_factory=list, description="regexes on db.table.column")
    column_mask: list[str] = Field(default_factory=list, description="regexes on db.table.column; values become ***")
    tombstones_on_delete: bool = True
    skipped_operations: list[Literal["c", "u", "d", "t"]] = Field(
        default_factory=list,
        description="ops not written (Debezium's skipped.operations; Debezium's default skips "
        "'t', ours writes truncates because the merger needs them)",
    )
    schemas_enable: bool = Field(False, description="wrap key and value in {schema, payload}")
    decimal_handling_mode: Literal["precise", "string", "double"] = "precise"
    time_precision_mode: Literal["adaptive_time_microseconds", "connect"] = "adaptive_time_microseconds"
    bigint_unsigned_handling_mode: Literal["long", "precise"] = "long"
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = "bytes"
    enable_time_adjuster: bool = Field(
        False,
        description="Debezium's enable.time.adjuster: years 0-69 of DATE/DATETIME/TIMESTAMP become "
        "2000-2069, 70-99 become 1970-1999. Off: the sinks hold the source's years "
        "(Debezium's default is on)",
    )
    provide_transaction_metadata: bool = False
    topic_partitions: int = Field(3, ge=1, le=1000)
    topic_partitions_per_table: dict[str, int] = Field(default_factory=dict)
    heartbeat_interval_ms: int = Field(10_000, ge=0, description="0 disables heartbeats")
    binlog_silence_s: float = Field(
        20.0,
        ge=3,
        le=3600,
        description="how long the binlog stream may carry nothing, not even the server's heartbeat (asked "
        "for every second at most while the source is quiet), before ingest counts the connection lost "
        "(a half-open connection, a server that hangs) and reads again from its position; a loaded "
        "server or machine may delay its heartbeats by seconds",
    )
    watermark_table: str = Field("cdc.cdc_watermarks", description="db.table of DBLog watermarks")
    commit_every_events: int = Field(
        20_000,
        ge=1,
        description="events per Kafka transaction, at most; also the records of one source "
        "transaction held back (for a ROLLBACK TO) before they are sent",
    )
    hold_max_mb: int = Field(
        64,
        ge=1,
        description="MB of one source transaction's records held back (so that a ROLLBACK TO can "
        "drop them) before they are sent, at most: bounds ingest's memory for large rows",
    )
    commit_every_ms: int = Field(
        200,
        ge=1,
        description="least time between two Kafka commits: a source transaction that ends later than that "
        "after the last commit is committed at once (an isolated change on a quiet source waits for no "
        "timer), sooner ones wait for the next commit; also the server heartbeat period asked for (at "
        "most 1 s), which bounds that wait while the source is quiet",
    )
    retry_max_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="longest wait between two attempts to reach the source or the broker again "
        "(the wait starts at 1 s and doubles up to this)",
    )
    on_xa_rollback: Literal["fail", "warn"] = Field(
        "fail",
        description="an XA transaction rolled back after XA PREPARE, whose changes were written "
        "at the PREPARE: fail = stop with an error naming the tables to re-snapshot; "
        "warn = log that error and go on",
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="Prometheus port; 0 = off")
    metrics_address: str = Field(
        "127.0.0.1", description="address the metrics port listens on (0.0.0.0: all, e.g. in a container)"
    )
    state_name: str | None = Field(
        None,
        description="transactional.id suffix (default: topic_prefix); still one ingest per topic_prefix "
        "(operations/faults.md: A second ingest)",
    )
    shards: list[ShardConfig] = Field(default_factory=list, description=SHARDS_DESCRIPTION)
    routes: list[RouteConfig] = Field(default_factory=list, description=ROUTES_DESCRIPTION)
    key_mode: Literal["origin", "unique"] = Field("origin", description=KEY_MODE_DESCRIPTION)

    _regexes = field_validator(
        "database_include", "database_exclude", "table_include", "table_exclude", "column_exclude", "column_mask"
    )(_check_regexes)
    _qualified = field_validator("watermark_table")(_check_qualified)
    _shards = field_validator("shards")(_check_shards)

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", value):
            raise ValueError("only letters, digits, '.', '_' and '-' are allowed")
        return value


def format_validation_error(exc: ValidationError, source: str) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "<root>"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "literal_error":
        msg = f"must be one of {err['ctx']['expected']}"
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{source}: {key}: {msg}{more}"


def load_model(model: type[BaseModel], path: str | Path | None, overrides: dict | None = None):
    data: dict = {}
    source = str(path) if path else "configuration"
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"{path}: file not found") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value  # overrides (the local stack's addresses) win over the file
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


class LatestTableConfig(_Model):
    """The latest state of each row (the default)."""

    mode: Literal["latest"]


class SCD2TableConfig(_Model):
    """An SCD type 2 history: one row per version of each row, with ``__start_at`` /
    ``__end_at`` (docs/history.md)."""

    mode: Literal["scd2"]
    track_history: list[str] | None = Field(
        None, description="the columns whose change opens a new version (default: every non-key column)"
    )
    track_history_except: list[str] | None = Field(
        None, description="every non-key column but these opens a new version; these update the current one"
    )

    @model_validator(mode="after")
    def _one_list(self) -> "SCD2TableConfig":
        if self.track_history is not None and self.track_history_except is not None:
            raise ValueError("give track_history or track_history_except, not both")
        for name in ("track_history", "track_history_except"):
            if getattr(self, name) == []:
                raise ValueError(f"{name} lists no column (leave it out to track every column)")
        return self


class ChangelogTableConfig(_Model):
    """An append-only change log: one row per change (docs/history.md)."""

    mode: Literal["changelog"]
    image: Literal["after", "before_after"] = Field(
        "after",
        description="after: the row after the change (a delete keeps its key); before_after: also the row before "
        "it, a column __before_<column> of the same type per column (needs binlog_row_image=FULL)",
    )


TableModeConfig = Annotated[
    LatestTableConfig | SCD2TableConfig | ChangelogTableConfig,
    Field(discriminator="mode"),
]
TABLES_DESCRIPTION = (
    "per table <database>.<table>, what the sink keeps: {mode: latest} (the default), {mode: scd2, "
    "track_history: [...] or track_history_except: [...]} or {mode: changelog, image: after or before_after}; "
    "see docs/history.md"
)


def _check_table_names(cls, value: dict) -> dict:
    for name in value:
        if name.count(".") != 1:
            raise ValueError(f"{name!r} must be <database>.<table>")
    return value


class PostgresSinkConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(5432, ge=1, le=65535)
    user: str = "cdc"
    dbname: str = "cdc"
    password_env: str | None = None
    password_file: str | None = None
    schema_: str | None = Field(
        None, alias="schema", description="target schema; default: one schema per source database"
    )
    nul_policy: Literal["strip", "replace", "pause"] = Field(
        "strip",
        description="NUL characters (U+0000) in text and JSON values, which PostgreSQL text and jsonb "
        "cannot store: strip (remove them), replace (with U+FFFD) or pause (pause that "
        "table with an error naming table, key and column); a NUL in a key column always "
        "pauses. See docs/values.md",
    )
    tables: dict[str, TableModeConfig] = Field(default_factory=dict, description=TABLES_DESCRIPTION)
    _tables = field_validator("tables")(_check_table_names)

    def settings(self) -> dict:
        secret = _read_secret(self.password_env, self.password_file, "sinks.postgres.password")
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "dbname": self.dbname,
            "password": secret.get_secret_value() if secret else "",
        }


class ObjectStoreConfig(_Model):
    """Where an ``s3://`` Delta path is served. Credentials are never in the config: they come
    from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN in the environment,
    or from ``credentials_file``."""

    endpoint: str | None = Field(
        None,
        description="URL of the S3 API (an S3-compatible server, e.g. http://127.0.0.1:9000); default: AWS S3",
    )
    region: str | None = Field(None, description="the bucket's region; default: us-east-1")
    addressing: Literal["virtual", "path"] = Field(
        "virtual",
        description="virtual: requests to https://<bucket>.<endpoint>/<key> (AWS); path: "
        "<endpoint>/<bucket>/<key> (most S3-compatible servers: MinIO, moto, Ceph)",
    )
    allow_http: bool = Field(
        False,
        description="allow a plain http:// endpoint (a local server only: requests are not encrypted)",
    )
    credentials_file: str | None = Field(
        None,
        description="a file of AWS_ACCESS_KEY_ID=..., AWS_SECRET_ACCESS_KEY=... (and AWS_SESSION_TOKEN=...) "
        "lines; default: those variables of the environment",
    )
    request_timeout_s: float = Field(
        60.0,
        gt=0,
        description="a request to the store (a data file's upload included) that is not answered within this "
        "fails; the write is then retried and `cdc status` shows the table blocked on the Delta sink. A store "
        "that hangs is seen after about this long: lower it on a fast network, keep it above the time to "
        "upload a file of compact_target_mb",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value

    def credentials(self):
        from cdc.object_store import credentials_from, parse_credentials_file

        what = "sinks.delta.object_store.credentials_file"
        try:
            if self.credentials_file:
                try:
                    text = Path(self.credentials_file).read_text()
                except OSError as exc:
                    raise ConfigError(f"{what}: cannot read {self.credentials_file}: {exc.strerror}") from None
                return parse_credentials_file(text, f"{what} {self.credentials_file}")
            return credentials_from(dict(os.environ), "sinks.delta: the environment")
        except ValueError as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(str(exc)) from None


class DeltaSinkConfig(_Model):
    path: str = Field(
        ...,
        description="base directory of the Delta tables, or an object-store URI s3://<bucket>/<prefix> "
        "(then see object_store)",
    )
    object_store: ObjectStoreConfig | None = Field(
        None, description="endpoint, region and addressing of an s3:// path (default: AWS S3, us-east-1)"
    )
    compact_every_commits: int = Field(
        100,
        ge=0,
        description="after this many micro-batches that wrote rows to a table, compact its small files "
        "(delta-rs OPTIMIZE compact, dataChange=false): each batch adds a file, and a MERGE's cost grows "
        "with the files it opens; 0 = never (then run OPTIMIZE yourself)",
    )
    compact_target_mb: int = Field(
        4,
        ge=1,
        description="size of the files a table is written in (its delta.targetFileSize) and compacted to: "
        "files under it are binned into files of about it, larger ones stay. A MERGE rewrites every file "
        "holding a key it updates or deletes: smaller files make updates cheaper, larger ones make reads faster",
    )
    tables: dict[str, TableModeConfig] = Field(
        default_factory=dict,
        description="per table <database>.<table>, what the sink keeps: {mode: latest} (the default), "
        "{mode: scd2, track_history: [...] or track_history_except: [...]} or "
        "{mode: changelog, image: after or before_after}; see docs/history.md",
    )
    _tables = field_validator("tables")(_check_table_names)

    @field_validator("path")
    @classmethod
    def _supported_uri(cls, value: str) -> str:
        from cdc.object_store import check_s3_uri, is_object_store

        problem = check_s3_uri(value) if is_object_store(value) else None
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _store_settings(self) -> "DeltaSinkConfig":
        from cdc.object_store import is_object_store

        store = self.object_store
        if store is not None and not is_object_store(self.path):
            raise ValueError("object_store is for an s3:// path only")
        if store is not None and store.endpoint and store.endpoint.startswith("http://") and not store.allow_http:
            raise ValueError(
                f"object_store.endpoint {store.endpoint} is plain http: set object_store.allow_http: true "
                "(a local server only) or use https"
            )
        return self

    def storage_options(self):
        """delta-rs storage options (None for a local path); reads the credentials."""
        from cdc.object_store import is_object_store, storage_options

        if not is_object_store(self.path):
            return None
        store = self.object_store or ObjectStoreConfig()
        return storage_options(
            store.endpoint,
            store.region,
            store.addressing,
            store.allow_http,
            store.credentials(),
            store.request_timeout_s,
        )


class KafkaChangelogSinkConfig(_Model):
    topic_prefix: str = Field(..., description="merged changelog topics: <topic_prefix>.<db>.<table>")
    partitions: int = Field(1, ge=1)


class SinksConfig(_Model):
    delta: DeltaSinkConfig | None = None
    postgres: PostgresSinkConfig | None = None
    kafka_changelog: KafkaChangelogSinkConfig | None = None

    def table_mode(self, sink: str, table: str) -> str:
        """What sink ``sink`` keeps of ``table`` (its ``tables:``; latest when not named)."""
        entry = (getattr(getattr(self, sink, None), "tables", None) or {}).get(table)
        return entry.mode if entry is not None else "latest"


class SnapshotConfig(_Model):
    auto_new_tables: bool = Field(True, description="snapshot a table when it is seen for the first time")
    chunk_size: int = Field(50_000, ge=100, description="rows per chunk, at most")
    chunk_mb: int = Field(
        128,
        ge=1,
        description="MB per chunk, about, by the source's average row length (information_schema.TABLES."
        "AVG_ROW_LENGTH, BLOB and TEXT included): fewer rows per chunk for a table of wide rows, as one "
        "Spark task holds a chunk in memory while it reads and stages it; the log says when it cuts",
    )
    parallelism: int = Field(
        2,
        ge=1,
        le=64,
        description="reads at once: a window's chunks are split into this many runs, one "
        "Spark task (one source connection) each; in local mode with the default spark_master, "
        "at most the machine's cores (more only contend), and Spark gets that + 2 task slots",
    )
    chunks_per_window: int = Field(4, ge=1, description="chunks between one LOW and one HIGH watermark")
    window_timeout_s: float = Field(
        120.0,
        gt=0,
        description="retry a window whose markers do not arrive (only once the merger has read its topic to "
        "the end; 3 windows of a table expiring in a row pause the table with the reason, see "
        "docs/operations/snapshots-and-schema-changes.md, Snapshots)",
    )
    reader: Literal["connectorx", "jdbc"] = Field(
        "connectorx",
        description="how Spark tasks read chunks: connectorx (Arrow, fast) or jdbc (Spark JDBC with "
        "the MariaDB driver; used anyway when mysql.ssl_mode asks for TLS)",
    )
    fetch_size: int = Field(10_000, ge=1)
    emit_rows_per_batch: int = Field(
        100_000,
        ge=1,
        description="snapshot rows written to the sinks per micro-batch, about (at least one "
        "window): bounds how long a batch, and so streaming latency, waits on a snapshot",
    )
    chunk_keys: dict[str, list[str]] = Field(
        default_factory=dict, description="db.table -> columns, for tables without a primary key"
    )
    watermarks: Literal["table", "positions"] = Field(
        "table",
        description="how a snapshot window's LOW and HIGH watermarks are made: table (rows written to "
        "watermark_table, which ingest turns into markers: needs INSERT, DELETE on it) or positions (the "
        "source's binlog position read around each chunk SELECT, nothing written: for a read-only user or "
        "a read_only server; the source must be the server ingest follows). docs/operations/"
        "snapshots-and-schema-changes.md, Snapshots without writes",
    )


class ContinuousVerifyConfig(_Model):
    chunks_per_minute: float = Field(
        0,
        ge=0,
        description="key-range chunks the merger verifies per minute in the background, table after table "
        "(each: a digest query on the source and on each sink; differences confirmed in verify windows, "
        "as `cdc verify`); 0: off. `cdc status` shows each table's last pass; see "
        "docs/operations/verify-and-repair.md",
    )
    chunk_size: int = Field(50_000, ge=100, description="rows per verified chunk")
    repair: bool = Field(False, description="repair what a pass confirms as different (as `cdc repair`)")


class VerifyConfig(_Model):
    continuous: ContinuousVerifyConfig = Field(default_factory=ContinuousVerifyConfig)


class MergerConfig(_Model):
    """Configuration of one ``cdc merge`` process."""

    topic_prefix: str = Field("cdc", description="the ingest (or Debezium) topic.prefix to consume")
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    mysql: MySQLConfig = Field(default_factory=MySQLConfig, description="source, for snapshots and watermarks")
    watermark_table: str = "cdc.cdc_watermarks"
    shards: list[ShardConfig] = Field(
        default_factory=list,
        description="as ingest's `shards`: the servers of a sharded source, which the merger snapshots "
        "(each with its own watermark table) and reads definitions from; empty: `mysql`",
    )
    routes: list[RouteConfig] = Field(default_factory=list, description="as ingest's `routes` (the same rules)")
    key_mode: Literal["origin", "unique"] = Field("origin", description="as ingest's `key_mode`")
    source_connector: Literal["ingest", "debezium"] = Field(
        "ingest",
        description="what writes the topics: `ingest` (snapshots are the merger's DBLog "
        "watermark windows) or `debezium` (Debezium's MySQL connector / Kafka Connect: "
        "snapshots are Debezium's own, asked for through `signal_table`)",
    )
    signal_table: str | None = Field(
        None,
        description="db.table of Debezium's signal table (its signal.data.collection); "
        "source_connector debezium: `cdc snapshot` and new tables insert execute-snapshot rows",
    )
    table_include: list[str] = Field(default_factory=list, description="regexes on db.table; empty = all")
    table_exclude: list[str] = Field(default_factory=list)
    sinks: SinksConfig = Field(default_factory=SinksConfig)
    snapshot: SnapshotConfig = Field(default_factory=SnapshotConfig)
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    state_dir: str = Field("./.cdc/merger", description="Spark checkpoint, reconciliation state, staging")
    retry_max_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="longest wait between two attempts to reach the source or a sink again while it is "
        "down (the wait starts at 1 s and doubles up to this)",
    )
    sink_outage_max_s: float = Field(
        0,
        ge=0,
        description="how long the merger waits for an unreachable sink (retrying, the table shown blocked "
        "in `cdc status` and the logs) before it stops with one line naming the sink; the batch is not "
        "committed, so nothing is lost. 0 = no bound (an outage loses nothing: the changes wait in Kafka, "
        "whose retention is the real limit)",
    )
    spark_master: str = Field(
        "local[2]",
        description="used when not started by spark-submit; the default "
        "local[2] becomes local[min(snapshot.parallelism, cores) + 2]; spark://host:port: a standalone "
        'cluster in client mode (the merger is the driver; README, "On a Spark cluster")',
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description=("extra Spark settings, over the merger's own")
    )
    spark_auth_secret_env: str | None = Field(
        None,
        description="environment variable holding the shared secret of a Spark cluster that authenticates "
        "(spark.authenticate): set, the merger turns spark.authenticate and spark.network.crypto.enabled on, "
        "with this secret (never on a command line or in a log); docs/security.md",
    )
    spark_auth_secret_file: str | None = Field(None, description="file holding that secret (first line)")
    spark_class_archive: bool = Field(
        True,
        description="local mode: start Spark's JVM from the class-data archive that `cdc spark-archive` "
        "builds (the README's install does), ~2 s faster; without one the JVM starts as usual",
    )
    trigger_interval_ms: int = Field(
        200,
        ge=0,
        description="ms between micro-batches while changes arrive slower than a batch takes; a change on a "
        "quiet source waits up to this long for its batch (measured: 200 ms costs ~1 % of a core more than "
        "500 ms on an idle source); 0: no pause (the topics are polled without rest while idle)",
    )
    min_batch_gap_ms: int = Field(
        0,
        ge=0,
        le=60_000,
        description="a micro-batch starts at least this many ms after the one before; the changes that "
        "arrive meanwhile go in the next one. Each batch costs about the same fixed CPU whatever it "
        "carries, so under a steady load fewer, larger batches cost less CPU per change; a change on a "
        "quiet source (no batch in the last min_batch_gap_ms) still starts one at the next trigger, and for "
        "10 s after a watermark write (snapshot, repair and verify windows) no batch is held, so windows "
        "close as fast as without it. 0: a batch at every trigger with changes. "
        "docs/operations/sizing.md, CPU per change",
    )
    max_records_per_trigger: int = Field(200_000, ge=1)
    batch_memory_mb: int = Field(
        512,
        ge=16,
        description="the merger's memory for one micro-batch of changes, about: a batch admits the records "
        "whose estimated cost fits (8 KB plus 8x its bytes per record, learned per topic from the batches "
        "before), so wide rows make smaller batches; a topic seen for the first time starts with "
        "batch_memory_mb/64 per record. One record larger than this still goes through, alone. "
        "See docs/operations/sizing.md, Memory",
    )
    records_per_task: int = Field(
        100_000,
        ge=1,
        description="Kafka offsets per Spark read task, about: a micro-batch's partition ranges are "
        "packed into tasks of this size, each read by one consumer; a batch of more offsets than "
        "10,000 per task slot (a backlog) is spread over Spark's task slots (in local mode at most "
        "the machine's cores), never more tasks than partitions with records; 1 = one task per "
        "partition and offset range",
    )
    batch_reads: Literal["auto", "driver", "spark"] = Field(
        "auto",
        description="who reads a micro-batch's records from Kafka. driver: the merger's driver, with the "
        "same reader and the same offsets as Spark's tasks, and no Spark job (a job's fixed cost is most of a "
        "small batch's CPU, and in local mode the driver reads a large batch twice as fast as two tasks whose "
        "rows then travel through the JVM). spark: Spark's tasks, spread over the task slots for a large "
        "batch (on a cluster: the executors fetch and convert, not the driver's machine). auto: driver in "
        "local mode; on a cluster, driver for a batch Spark plans as one task (under 10,000 offsets per task "
        "slot) and Spark's tasks for larger ones. docs/operations/sizing.md, CPU per change",
    )
    end_probe: Literal["scan", "watermark"] = Field(
        "scan", description="scan: read the partition tail to find the end (needed on Tansu)"
    )
    end_check_all_ms: int = Field(
        5000,
        ge=0,
        le=60_000,
        description="how often the Kafka source asks the broker for the end of every partition it reads; in "
        "between only for the partitions of the topics that ingest's latest transactions wrote (each "
        "transaction's position record on <prefix>.offsets names them). Records another producer writes "
        "to the table topics are read this much later at most. 0: every partition on every trigger "
        "(always so with source_connector debezium)",
    )
    on_bad_record: Literal["pause", "dead_letter", "stop"] = Field(
        "pause",
        description="a record the merger cannot apply: `pause` pauses its table (its changes kept on disk; "
        "an unreadable record also goes to the dead-letter topic; records of no known table go there too), "
        "`dead_letter` writes it to "
        "<prefix>.dlq and goes on, `stop` stops the merger",
    )
    on_drop: Literal["truncate", "keep"] = Field(
        "truncate",
        description="the sink tables of a table dropped (or renamed away) in the source: `truncate` "
        "empties them where the DROP falls in the stream, so a table created again under "
        "the name starts empty; `keep` leaves their rows (a table created again writes "
        "into them by key); for one physical table of a logical table (routes, shards), "
        "the same for that origin's rows",
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="Prometheus port; 0 = off")
    metrics_address: str = Field(
        "127.0.0.1", description="address the metrics port listens on (0.0.0.0: all, e.g. in a container)"
    )

    _regexes = field_validator("table_include", "table_exclude")(_check_regexes)
    _qualified = field_validator("watermark_table")(_check_qualified)
    _shards = field_validator("shards")(_check_shards)

    @field_validator("signal_table")
    @classmethod
    def _signal_table(cls, value: str | None) -> str | None:
        return None if value is None else _check_qualified(cls, value)

    @field_validator("spark_conf")
    @classmethod
    def _no_spark_secret(cls, value: dict) -> dict:
        for key in value:
            if key.lower().startswith(SPARK_AUTH_SECRET):
                raise ValueError(
                    f"{key} is a secret and is not read from the config file; "
                    "use spark_auth_secret_env or spark_auth_secret_file"
                )
        return value

    def spark_auth_secret(self) -> SecretStr | None:
        """The Spark cluster's shared secret (spark.authenticate), or None: not configured."""
        return _read_secret(self.spark_auth_secret_env, self.spark_auth_secret_file, "spark_auth_secret")

    @model_validator(mode="after")
    def _positions_need_ingest(self) -> "MergerConfig":
        if self.snapshot.watermarks == "positions":
            if self.source_connector != "ingest":
                raise ValueError(
                    "snapshot.watermarks: positions needs the topics of our ingest (its committed positions "
                    f"on <prefix>.offsets); source_connector is {self.source_connector}"
                )
            if self.shards:
                raise ValueError("snapshot.watermarks: positions is not available for a sharded source yet")
            if self.verify.continuous.chunks_per_minute:
                raise ValueError(
                    "verify.continuous writes its verify windows' watermarks to watermark_table, which "
                    "snapshot.watermarks: positions avoids: not available together yet (set "
                    "verify.continuous.chunks_per_minute: 0, or snapshot.watermarks: table)"
                )
        return self

    @model_validator(mode="after")
    def _unique_needs_rows(self) -> "MergerConfig":
        if self.key_mode == "unique" and not (self.sinks.postgres or self.sinks.delta):
            raise ValueError(UNIQUE_NEEDS_ROWS)
        for sink in ("delta", "postgres") if self.key_mode == "unique" else ():
            tables = getattr(self.sinks, sink).tables if getattr(self.sinks, sink) else {}
            kept = sorted(t for t, e in tables.items() if e.mode != "latest")
            if kept:  # merger.batch.owner_check reads each key's row back from a latest-state table
                raise ValueError(
                    f"key_mode: unique reads each key's owner from the sinks' latest state; "
                    f"sinks.{sink}.tables gives {kept[0]} mode {tables[kept[0]].mode} "
                    "(history modes are not available with key_mode: unique yet)"
                )
        return self


def routes_of(config: IngestConfig | MergerConfig) -> Routes:
    """The ``cdc.routes.Routes`` of a process's config."""
    return Routes([Route(r.match, r.to) for r in config.routes], config.key_mode, sharded=bool(config.shards))
