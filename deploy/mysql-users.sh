#!/bin/bash
# MySQL init step 1 of 2 (mounted as /docker-entrypoint-initdb.d/01-users.sh; runs once, when
# the data directory is empty, before 02-init.sql). Creates the users with the passwords of
# the compose secrets, so no password is written in any config or SQL file. The grants are
# in mysql-init.sql.
#
# mysql_native_password (enabled with --mysql-native-password=ON): pymysql (ingest, the
# merger) needs the `cryptography` package for caching_sha2_password over a non-TLS
# connection, and MariaDB Connector/J 2.7 (Debian's libmariadb-java, used by Spark JDBC)
# needs allowPublicKeyRetrieval; native passwords need neither.

sql_literal() {  # the content of a secret file as an SQL string literal
    local value
    value="$(cat "$1")"
    value="${value//\\/\\\\}"
    value="${value//\'/\'\'}"
    printf "'%s'" "$value"
}

MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysql --protocol=socket --socket="${SOCKET:-/var/run/mysqld/mysqld.sock}" -uroot <<SQL
CREATE USER IF NOT EXISTS 'cdc_ingest'@'%' IDENTIFIED WITH mysql_native_password BY $(sql_literal /run/secrets/mysql_ingest_password);
CREATE USER IF NOT EXISTS 'cdc_merger'@'%' IDENTIFIED WITH mysql_native_password BY $(sql_literal /run/secrets/mysql_merger_password);
CREATE USER IF NOT EXISTS 'cdc_debezium'@'%' IDENTIFIED WITH mysql_native_password BY $(sql_literal /run/secrets/mysql_debezium_password);
SQL
