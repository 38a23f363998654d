-- Init step 2 of 3 of both source servers (mounted as /docker-entrypoint-initdb.d/02-shop.sql
-- into `mysql` and `mariadb`; runs once, when the data directory is empty): the demo schema
-- that the pipeline captures and merges into Delta and PostgreSQL. The same SQL runs on
-- MySQL 8.4 and MariaDB 11.4.

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
