package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL baselines: a plain upsert on a table like the Store's but
// without the fence column and its WHERE, a plain transaction, and the
// server's own advisory lock.

func init() {
	addGroup(Group{ID: "pg-write-1", Title: "PostgreSQL: fenced upsert (Store.Put) vs plain upsert, 1 goroutine (latency)",
		Kind: Latency, Needs: NeedPostgres,
		Note: "Plain: INSERT ... ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value on (key text COLLATE \"C\" PRIMARY KEY, value bytea). " +
			"Fenced: Store.Put, the same upsert with the fence column, WHERE t.fence <= EXCLUDED.fence and RETURNING."})
	addGroup(Group{ID: "pg-write-32", Title: fmt.Sprintf("PostgreSQL: fenced upsert vs plain upsert, %d goroutines on distinct keys (throughput)", Workers),
		Kind: Throughput, Needs: NeedPostgres})
	addGroup(Group{ID: "pg-tx-1", Title: "PostgreSQL: a transaction with and without Guard.Check, 1 goroutine (latency)",
		Kind: Latency, Needs: NeedPostgres,
		Note: "BEGIN; UPDATE accounts SET balance = balance + 1 WHERE id = $1; COMMIT. The guarded one runs Guard.Check(tx, resource, token) first."})
	addGroup(Group{ID: "pg-row-1", Title: "PostgreSQL: version-column UPDATE vs plain UPDATE, 1 goroutine (latency)",
		Kind: Latency, Needs: NeedPostgres,
		Note: "Plain: UPDATE accounts SET balance = $1 WHERE id = $2. Fenced: postgres.UpdateFenced, which adds fence = $t ... AND coalesce(fence, 0) <= $t."})
	addGroup(Group{ID: "pg-lock-1", Title: "PostgreSQL: acquire + release, 1 goroutine (latency)",
		Kind: Latency, Needs: NeedPostgres,
		Note: "Baseline: pg_try_advisory_lock + pg_advisory_unlock on one pooled connection (session-bound, no token). " +
			"fencekit's lease row works on any connection and survives the session."})

	addCase(Case{Group: "pg-write-1", Name: "plain upsert", Baseline: true, Op: benchPlainUpsert1})
	addCase(Case{Group: "pg-write-32", Name: "plain upsert", Baseline: true, Run: benchPlainUpsert32})
	addCase(Case{Group: "pg-tx-1", Name: "plain transaction", Baseline: true, Op: func(e *Env) (op, error) { return benchTx(e, nil) }})
	addCase(Case{Group: "pg-row-1", Name: "plain UPDATE", Baseline: true, Op: benchPlainUpdate})
	addCase(Case{Group: "pg-lock-1", Name: "advisory lock+unlock", Baseline: true, Op: benchAdvisory})

	setups = append(setups, setupPG)
	cleanups = append(cleanups, cleanupPG)
}

// Table returns the name of one of this run's tables.
func (e *Env) Table(suffix string) string {
	return strings.ReplaceAll(e.Prefix, "-", "_") + "_" + suffix
}

func (e *Env) plainTable() string    { return pgx.Identifier{e.Table("plain")}.Sanitize() }
func (e *Env) accountsTable() string { return pgx.Identifier{e.Table("accounts")}.Sanitize() }

func setupPG(ctx context.Context, e *Env) error {
	if e.PG == nil {
		return nil
	}
	e.accountUpdate = fmt.Sprintf(`UPDATE %s SET balance = balance + 1 WHERE id = $1`, e.accountsTable())
	_, err := e.PG.Exec(ctx, fmt.Sprintf(`
CREATE TABLE %[1]s (key text COLLATE "C" PRIMARY KEY, value bytea);
CREATE TABLE %[2]s (id bigint PRIMARY KEY, balance bigint NOT NULL, fence bigint);
INSERT INTO %[2]s (id, balance) SELECT g, 0 FROM generate_series(0, %[3]d) g;`,
		e.plainTable(), e.accountsTable(), Workers))
	return err
}

func cleanupPG(ctx context.Context, e *Env) {
	if e.PG == nil {
		return
	}
	_, _ = e.PG.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s`, e.plainTable(), e.accountsTable()))
}

func (e *Env) plainUpsertSQL() string {
	return fmt.Sprintf(`INSERT INTO %s AS t (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, e.plainTable())
}

func benchPlainUpsert1(e *Env) (op, error) {
	q, key := e.plainUpsertSQL(), e.Key("upsert", "lat")
	return func(ctx context.Context) (bool, error) {
		_, err := e.PG.Exec(ctx, q, key, e.Value)
		return true, err
	}, nil
}

func benchPlainUpsert32(b *testing.B, e *Env) {
	q := e.plainUpsertSQL()
	st := runWorkers(b, e, Workers, func(w int) op {
		key := e.Key("upsert", "tp", w)
		return func(ctx context.Context) (bool, error) {
			_, err := e.PG.Exec(ctx, q, key, e.Value)
			return true, err
		}
	})
	b.ReportMetric(float64(b.N)/st.Elapsed.Seconds(), "ops/s")
}

// benchTx runs the account transaction; check, when set, runs first inside it.
func benchTx(e *Env, check func(ctx context.Context, tx pgx.Tx) error) (op, error) {
	return func(ctx context.Context) (bool, error) {
		return true, accountTx(ctx, e.PG, e, check)
	}, nil
}

func benchPlainUpdate(e *Env) (op, error) {
	q := fmt.Sprintf(`UPDATE %s SET balance = $1 WHERE id = $2`, e.accountsTable())
	var n int64
	return func(ctx context.Context) (bool, error) {
		n++
		_, err := e.PG.Exec(ctx, q, n, int64(2))
		return true, err
	}, nil
}

func benchAdvisory(e *Env) (op, error) {
	key := int64(0x6b636e6562) // arbitrary, this run's own server or a rarely used id
	return func(ctx context.Context) (bool, error) {
		c, err := e.PG.Acquire(ctx)
		if err != nil {
			return false, err
		}
		defer c.Release()
		var ok bool
		if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
			return false, err
		}
		if !ok {
			return false, fmt.Errorf("advisory lock %d not acquired: %w", key, errUnexpected)
		}
		_, err = c.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key)
		return true, err
	}, nil
}
