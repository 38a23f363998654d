"""A MariaDB primary with a GTID replica, a switchable TCP proxy in front of them (a stand-in
for a virtual IP) and a steady write load through it: what a failover test needs.

The pair is private (its own two servers, cdc.stack's start functions): promoting a
replica, or replicating the shared server's whole history, would disturb the other tests."""

from __future__ import annotations

import random
import socket
import threading
import time
from pathlib import Path

import pymysql

from cdc import stack as local_stack
from cdc import stack_shards


def root(info: local_stack.StackInfo, port: int | None = None) -> pymysql.Connection:
    m = info.mariadb
    return pymysql.connect(
        ssl_disabled=True,
        host=m.host,
        port=port or m.port,
        user="root",
        password=m.root_password,
        autocommit=True,
        connect_timeout=5,
    )


def query_one(info: local_stack.StackInfo, sql: str, args=None):
    conn = root(info)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()
    finally:
        conn.close()


def start_server(state_dir: Path, server_id: int) -> local_stack.StackInfo:
    return stack_shards.start_server(state_dir, server_id, 0)


# a GTID replica, and waiting for it to catch up: the local stack's shards have them too
start_replica = stack_shards.start_replica
caught_up = stack_shards.caught_up
using_gtid = stack_shards.using_gtid  # "Slave_Pos" for a GTID replica


def promote(replica: local_stack.StackInfo) -> None:
    """The replica becomes a primary (the writes to the old one are stopped and caught up)."""
    conn = root(replica)
    try:
        with conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
            cur.execute("SET GLOBAL read_only = 0")
    finally:
        conn.close()


class TcpProxy:
    """Forwards 127.0.0.1:<port> to the current target port; ``switch`` changes the target
    and closes every connection already forwarded (as a moved virtual IP does to them) or not."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._silenced: set[socket.socket] = set()  # open, but what they send goes nowhere
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if src not in self._silenced:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(src)
            self._drop(dst)

    def _drop(self, s: socket.socket) -> None:
        with self._lock:
            self._open.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def switch(self, target_port: int, close_existing: bool = True) -> None:
        """New connections go to ``target_port``; existing ones are closed, or, as some
        virtual IPs leave them, stay with the old server."""
        self.target_port = target_port
        if not close_existing:
            return
        with self._lock:
            current = list(self._open)
        for s in current:
            self._drop(s)

    def silence(self) -> None:
        """Every connection already forwarded stays open but carries nothing more either
        way (a half-open connection after a network fault); new ones are forwarded."""
        with self._lock:
            self._silenced |= self._open

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.switch(self.target_port)


class WriteLoad(threading.Thread):
    """Inserts, updates and deletes on ``tables`` (id INT PRIMARY KEY, v VARCHAR, n INT)
    through ``port``, a statement every few ms, until stopped; ``pause()`` returns once no
    statement is in flight. Connection errors (a switch) are retried on a new connection;
    a statement whose outcome is unknown is fine: the check compares with the server."""

    def __init__(self, info: local_stack.StackInfo, port: int, db: str, tables: list[str], seed: int = 7):
        super().__init__(daemon=True, name="write-load")
        self.info, self.port, self.db, self.tables = info, port, db, tables
        self.rand = random.Random(seed)
        self.next_id = 1000
        self.stop_event = threading.Event()
        self.running = threading.Event()
        self.running.set()
        self.idle = threading.Event()
        self.statements = 0
        self.failures = 0

    def pause(self, timeout_s: float = 30) -> None:
        self.running.clear()
        assert self.idle.wait(timeout_s), "the write load did not pause"

    def resume(self) -> None:
        self.idle.clear()
        self.running.set()

    def stop(self) -> None:
        self.stop_event.set()
        self.running.set()
        self.join(30)

    def run(self) -> None:
        conn = None
        while not self.stop_event.is_set():
            if not self.running.is_set():
                self.idle.set()
                self.running.wait(1)
                continue
            try:
                if conn is None:
                    conn = root(self.info, self.port)
                self._one(conn)
                self.statements += 1
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError):
                self.failures += 1
                conn = None
                time.sleep(0.2)
            time.sleep(0.005)
        if conn is not None:
            conn.close()

    def _one(self, conn) -> None:
        table = f"{self.db}.{self.rand.choice(self.tables)}"
        r = self.rand.random()
        with conn.cursor() as cur:
            if r < 0.5:
                self.next_id += 1
                cur.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", (self.next_id, f"v{self.next_id}", 0))
            elif r < 0.85:
                cur.execute(
                    f"UPDATE {table} SET n = n + 1, v = CONCAT('u', n) WHERE id = %s",
                    (self.rand.randint(1, self.next_id),),
                )
            else:
                cur.execute(f"DELETE FROM {table} WHERE id = %s", (self.rand.randint(1, self.next_id),))
