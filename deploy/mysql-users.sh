#!/bin/bash
# MySQL init step 1 of 3 (mounted as /docker-entrypoint-initdb.d/01-users.sh into `mysql`;
# runs once, when the data directory is empty, before 02-shop.sql and 03-init.sql). Creates
# the users of the default path with the passwords of the compose secrets, so no password
# is written in any config or SQL file. The grants are in mysql-init.sql.
#
# mysql_native_password (enabled with --mysql-native-password=ON): pymysql (the merger)
# needs the `cryptography` package for caching_sha2_password over a non-TLS connection,
# and MariaDB Connector/J 2.7 (Debian's libmariadb-java, used by Spark JDBC) needs
# allowPublicKeyRetrieval; native passwords need neither.
#
# Secret files must not end with a newline: $(cat) drops it here, but Kafka Connect's
# DirectoryConfigProvider passes the file to Debezium as it is.

sql_literal() {  # the content of a secret file as an SQL string literal
    local value
    value="$(cat "$1")"
    value="${value//\\/\\\\}"
    value="${value//\'/\'\'}"
    printf "'%s'" "$value"
}

# sql_log_bin=0: the users (and their password hashes) stay out of the binlog
MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysql --protocol=socket --socket="${SOCKET:-/var/run/mysqld/mysqld.sock}" -uroot <<SQL
SET SESSION sql_log_bin = 0;
CREATE USER IF NOT EXISTS 'cdc_merger'@'%' IDENTIFIED WITH mysql_native_password BY $(sql_literal /run/secrets/mysql_merger_password);
CREATE USER IF NOT EXISTS 'cdc_debezium'@'%' IDENTIFIED WITH mysql_native_password BY $(sql_literal /run/secrets/mysql_debezium_password);
SQL
