#!/bin/bash
# MariaDB init step 1 of 3 (mounted as /docker-entrypoint-initdb.d/01-users.sh into
# `mariadb`, profile mariadb; runs once, when the data directory is empty, before
# 02-shop.sql and 03-init.sql). Creates the users of ingest and the merger with the
# passwords of the compose secrets, so no password is written in any config or SQL file.
# The grants are in mariadb-init.sql. MariaDB's default authentication
# (mysql_native_password) suits pymysql and MariaDB Connector/J alike.

sql_literal() {  # the content of a secret file as an SQL string literal
    local value
    value="$(cat "$1")"
    value="${value//\\/\\\\}"
    value="${value//\'/\'\'}"
    printf "'%s'" "$value"
}

# sql_log_bin=0: the users (and their password hashes) stay out of the binlog ingest reads
MYSQL_PWD="$MARIADB_ROOT_PASSWORD" mariadb --protocol=socket --socket="${SOCKET:-/run/mysqld/mysqld.sock}" -uroot <<SQL
SET SESSION sql_log_bin = 0;
CREATE USER IF NOT EXISTS 'cdc_ingest'@'%' IDENTIFIED BY $(sql_literal /run/secrets/mysql_ingest_password);
CREATE USER IF NOT EXISTS 'cdc_merger'@'%' IDENTIFIED BY $(sql_literal /run/secrets/mysql_merger_password);
SQL
