-- MySQL init step 3 of 3 (mounted as /docker-entrypoint-initdb.d/03-init.sql into `mysql`;
-- runs once, when the data directory is empty, after 01-users.sh created the users and
-- 02-shop.sql the demo schema): Debezium's signal table and the least privileges of the
-- default path's users. ingest does not read MySQL (it reads MariaDB, the `mariadb`
-- profile: mariadb-init.sql), so MySQL has no ingest user and no watermark table.

CREATE DATABASE IF NOT EXISTS `cdc`;

-- Debezium's signal table (signal.data.collection in connect-configs/mysql-source.json):
-- incremental snapshots on request, and the window marks of those snapshots.
CREATE TABLE IF NOT EXISTS `cdc`.`debezium_signal` (id VARCHAR(42) NOT NULL PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL) ENGINE=InnoDB;

-- merger (source_connector: debezium): SELECTs of the captured databases (table
-- definitions); writes only snapshot requests into Debezium's signal table.
GRANT SELECT ON `shop`.* TO 'cdc_merger'@'%';
GRANT INSERT ON `cdc`.`debezium_signal` TO 'cdc_merger'@'%';

-- Debezium's MySQL connector: the grants its documentation asks for, and writes to the
-- signal table (its incremental snapshots write window marks there).
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc_debezium'@'%';
GRANT INSERT, UPDATE, DELETE ON `cdc`.`debezium_signal` TO 'cdc_debezium'@'%';
