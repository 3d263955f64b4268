// Package gormtest runs the GORM recipe of docs/sqldb.md against real GORM
// in both of its modes (PrepareStmt false and true), on MariaDB and
// PostgreSQL. It is a module of its own so that GORM never becomes a
// dependency of the root module.
package gormtest
