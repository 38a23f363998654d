-- MariaDB init step 3 of 3 (mounted as /docker-entrypoint-initdb.d/03-init.sql into
-- `mariadb`, profile mariadb; runs once, when the data directory is empty, after
-- 01-users.sh created the users and 02-shop.sql the demo schema): the watermark table and
-- the least privileges of ingest and the merger.

CREATE DATABASE IF NOT EXISTS `cdc`;

-- DBLog watermark table: the merger writes a LOW and a HIGH row per snapshot window; ingest
-- turns each write into markers in the table's topic. Same DDL as merger/snapshot.py
-- watermark_ddl('cdc.cdc_watermarks'), created here because the merger user may not CREATE.
CREATE TABLE IF NOT EXISTS `cdc`.`cdc_watermarks` (table_name VARCHAR(512) NOT NULL PRIMARY KEY, window_id VARCHAR(64) NOT NULL, kind VARCHAR(8) NOT NULL, updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)) ENGINE=InnoDB;

-- ingest (ingest/checks.py): reads the binlog as a replica (REPLICATION SLAVE), the binlog
-- position (BINLOG MONITOR, MariaDB's name for REPLICATION CLIENT), and SELECT for table
-- definitions (information_schema, SHOW CREATE TABLE) of the captured databases, the
-- watermark table's included.
GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'cdc_ingest'@'%';
GRANT SELECT ON `shop`.* TO 'cdc_ingest'@'%';
GRANT SELECT ON `cdc`.* TO 'cdc_ingest'@'%';

-- merger (source_connector: ingest): snapshot SELECTs of the captured databases; writes
-- only the watermark table.
GRANT SELECT ON `shop`.* TO 'cdc_merger'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON `cdc`.`cdc_watermarks` TO 'cdc_merger'@'%';
