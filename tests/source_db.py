"""The tests' own plain connection to the stack's MariaDB (root, autocommit): the side of
the oracle that reads the source, and the workloads' writer. Shares nothing with the code
under test."""

from __future__ import annotations

import pymysql


def root_connection(stack, db: str | None = None) -> pymysql.Connection:
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )
