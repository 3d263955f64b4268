package sqldb

import (
	"database/sql"
	"reflect"

	"github.com/fencekit/fencekit/fence"
)

// TxOf returns the *sql.Tx that x is or wraps, for data-access layers that
// hand out a transaction under a type of their own: x may be a *sql.Tx, or
// a pointer to a struct whose field named Tx (embedded or not, of any type
// or interface) holds one, a few levels deep. That covers GORM's
// transaction connection pool in both modes (tx.Statement.ConnPool is a
// *sql.Tx, or a *gorm.PreparedStmtTX with PrepareStmt: true) and sqlx's
// *sqlx.Tx.
//
// Anything else is not a transaction, and is refused with an error matching
// fence.ErrInvalid: a *sql.DB, GORM's pool outside a transaction (a *sql.DB
// or a *gorm.PreparedStmtDB), a *sql.Conn, a nil. Guard.Check and
// UpdateFenced need a transaction: their row lock must last until commit.
func TxOf(x any) (*sql.Tx, error) {
	orig := x
	for range 4 {
		if tx, ok := x.(*sql.Tx); ok && tx != nil {
			return tx, nil
		}
		v := reflect.ValueOf(x)
		if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
			break
		}
		f := v.Elem().FieldByName("Tx")
		if !f.IsValid() || !f.CanInterface() {
			break
		}
		x = f.Interface()
	}
	return nil, fence.Invalid("sqldb: %T is not a transaction and wraps none (want a *sql.Tx, or a type with a field Tx holding one)", orig)
}
