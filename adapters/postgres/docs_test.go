package postgres_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

func readDoc(t *testing.T) string {
	b, err := os.ReadFile("../../docs/postgres.md")
	require.NoError(t, err)
	return string(b)
}

// docs/postgres.md shows the schema Migrate creates, verbatim.
func TestDocShowsMigrateSQL(t *testing.T) {
	sql, err := postgres.MigrateSQL(nil)
	require.NoError(t, err)
	require.Contains(t, readDoc(t), "```sql\n"+sql+"```", "update the schema in docs/postgres.md")
}

// restoreSQL returns the after-restore statement of docs/postgres.md.
func restoreSQL(t *testing.T) string {
	t.Helper()
	doc := readDoc(t)
	start := strings.Index(doc, "<!-- restore-sql -->")
	end := strings.Index(doc, "<!-- /restore-sql -->")
	require.True(t, start >= 0 && end > start, "restore-sql markers missing")
	block := doc[start:end]
	block = block[strings.Index(block, "```sql\n")+len("```sql\n"):]
	return block[:strings.Index(block, "```")]
}

// The after-restore statement in docs/postgres.md lifts every token and
// fence above anything issued before, and the adapter carries on from there.
func TestDocRestoreSQL(t *testing.T) {
	block := restoreSQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := migrated(t, testkit.Postgres(t))
	b, store := newCalls(pool, nil), postgres.NewStore(pool, nil)
	holder := newOwner(t)
	old, err := b.acquire(ctx, "job", holder, time.Minute)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, "k", old, []byte("v")))

	// The block has BEGIN and COMMIT of its own; send it as one simple query.
	_, err = pool.Exec(ctx, block)
	require.NoError(t, err)

	info, err := b.inspect(ctx, "job")
	require.NoError(t, err)
	require.Empty(t, info.Holders, "the restore statement frees every lease")
	next, err := b.acquire(ctx, "job", newOwner(t), time.Minute)
	require.NoError(t, err)
	floor := fence.Token(time.Now().Add(-time.Hour).UnixMicro())
	require.Greater(t, next, floor)
	require.ErrorIs(t, store.Put(ctx, "k", old, []byte("stale")), fence.ErrStale)
	require.NoError(t, store.Put(ctx, "k", next, []byte("new")))
	t.Logf("token before: %d, after the restore statement: %d", old, next)
}
