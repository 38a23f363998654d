-- MySQL init step 2 of 2 (mounted as /docker-entrypoint-initdb.d/02-init.sql; runs once, when
-- the data directory is empty, after 01-users.sh created the users): the project's tables,
-- a demo schema, and the least privileges of each user.

CREATE DATABASE IF NOT EXISTS `cdc`;

-- DBLog watermark table: the merger writes a LOW and a HIGH row per snapshot window; ingest
-- turns each write into markers in the table's topic. Same DDL as merger/snapshot.py
-- watermark_ddl('cdc.cdc_watermarks'), created here because the merger user may not CREATE.
CREATE TABLE IF NOT EXISTS `cdc`.`cdc_watermarks` (table_name VARCHAR(512) NOT NULL PRIMARY KEY, window_id VARCHAR(64) NOT NULL, kind VARCHAR(8) NOT NULL, updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)) ENGINE=InnoDB;

-- Debezium's signal table (signal.data.collection in connect-configs/mysql-source.json), for
-- users who run Debezium's connector instead of ingest: incremental snapshots on request.
CREATE TABLE IF NOT EXISTS `cdc`.`debezium_signal` (id VARCHAR(42) NOT NULL PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL) ENGINE=InnoDB;

-- Demo schema: captured by ingest (database_include), merged into Delta and PostgreSQL.
CREATE DATABASE IF NOT EXISTS `shop`;

CREATE TABLE IF NOT EXISTS `shop`.`customers` (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  name VARCHAR(100) NOT NULL,
  email VARCHAR(200) NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS `shop`.`orders` (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  customer_id INT NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  status ENUM('new','paid','shipped','cancelled') NOT NULL DEFAULT 'new',
  note JSON NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY ix_orders_customer (customer_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT INTO `shop`.`customers` (name, email) VALUES
  ('Ada Lovelace', 'ada@example.com'), ('Grace Hopper', 'grace@example.com'),
  ('Edsger Dijkstra', NULL);
INSERT INTO `shop`.`orders` (customer_id, amount, status, note) VALUES
  (1, 19.99, 'paid', '{"gift": true}'), (1, 5.00, 'new', NULL), (2, 120.50, 'shipped', NULL),
  (3, 42.00, 'cancelled', '{"reason": "duplicate"}');

-- ingest: reads the binlog as a replica; SELECT for table definitions (information_schema,
-- SHOW CREATE TABLE) of the captured databases, the watermark table's included.
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc_ingest'@'%';
GRANT SELECT ON `shop`.* TO 'cdc_ingest'@'%';
GRANT SELECT ON `cdc`.* TO 'cdc_ingest'@'%';

-- merger: snapshot SELECTs of the captured databases; writes only the watermark table (and,
-- with source_connector: debezium, snapshot requests into Debezium's signal table).
GRANT SELECT ON `shop`.* TO 'cdc_merger'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON `cdc`.`cdc_watermarks` TO 'cdc_merger'@'%';
GRANT INSERT ON `cdc`.`debezium_signal` TO 'cdc_merger'@'%';

-- Debezium's MySQL connector (connect-configs/): the grants its documentation asks for, and
-- writes to the signal table (its incremental snapshots write window marks there).
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc_debezium'@'%';
GRANT INSERT, UPDATE, DELETE ON `cdc`.`debezium_signal` TO 'cdc_debezium'@'%';
