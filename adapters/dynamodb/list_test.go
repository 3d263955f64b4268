package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// smallPages is a client whose Scans return at most two items a page, so
// that a test table of a few items needs several pages; pages counts them.
type smallPages struct {
	*awsddb.Client
	pages atomic.Int64
}

func (c *smallPages) Scan(ctx context.Context, in *awsddb.ScanInput, opts ...func(*awsddb.Options)) (*awsddb.ScanOutput, error) {
	c.pages.Add(1)
	cp := *in
	limit := int32(2)
	cp.Limit = &limit
	return c.Client.Scan(ctx, &cp, opts...)
}

// lockPathsOnly is a client with the lock paths (API) and no Scan.
type lockPathsOnly struct{ fenceddb.API }

// TestList: List returns the held locks under a prefix, sorted, each with
// its holder and the places in its line, across several Scan pages; it
// leaves out free locks, permit names and names outside the prefix.
func TestList(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	client := &smallPages{Client: srv.Client()}
	b, err := fenceddb.NewBackend(client, testTable, &fenceddb.BackendOptions{Prefix: prefix})
	require.NoError(t, err)
	const ttl = time.Minute
	take := func(name, owner, meta string, place time.Duration) (fence.Token, error) {
		g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Metadata: meta, Place: place})
		return g.Token, err
	}
	tokens := map[string]fence.Token{}
	for i, name := range []string{"jobs/e", "jobs/a", "jobs/c", "jobs/b", "jobs/d", "other/x"} {
		tok, err := take(name, "owner-"+name, fmt.Sprintf("meta %d", i), 0)
		require.NoError(t, err)
		tokens[name] = tok
	}
	// A free lock keeps its item, and is not listed.
	_, err = take("jobs/free", "owner-free", "", 0)
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, driver.Claim{Name: "jobs/free", Owner: "owner-free", Kind: driver.Exclusive}))
	// Two in line for jobs/c.
	for _, w := range []string{"w1", "w2"} {
		_, err := take("jobs/c", w, "", ttl)
		require.ErrorIs(t, err, lock.ErrHeld)
	}
	// A permit name is not a lock.
	_, err = b.Acquire(ctx, driver.Request{Name: "jobs/pool", Owner: "p", TTL: ttl, Kind: driver.Semaphore, Limit: 2})
	require.NoError(t, err)

	client.pages.Store(0)
	infos, err := b.List(ctx, "jobs/")
	require.NoError(t, err)
	require.True(t, client.pages.Load() > 1, "one page: %d", client.pages.Load())
	var names []string
	for _, info := range infos {
		names = append(names, info.Name)
		require.Equal(t, 1, len(info.Holders), info)
		h := info.Holders[0]
		require.Equal(t, "owner-"+info.Name, h.Owner)
		require.Equal(t, tokens[info.Name], h.Token)
		require.True(t, h.TTL > 0 && h.TTL <= ttl, h.TTL)
		require.Contains(t, h.Metadata, "meta ")
		want := 0
		if info.Name == "jobs/c" {
			want = 2
		}
		require.Equal(t, want, info.Waiting, info.Name)
	}
	require.Equal(t, []string{"jobs/a", "jobs/b", "jobs/c", "jobs/d", "jobs/e"}, names)

	all, err := b.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 6, len(all))
	require.Equal(t, "other/x", all[5].Name)
	none, err := b.List(ctx, "nothing/")
	require.NoError(t, err)
	require.Equal(t, 0, len(none))

	counts, err := b.Waiters(ctx, []string{"jobs/c", "jobs/a", "never/used"})
	require.NoError(t, err)
	require.Equal(t, []int64{2, 0, 0}, counts)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.List(canceled, "")
	require.ErrorIs(t, err, context.Canceled)
	_, err = b.Waiters(canceled, []string{"jobs/a"})
	require.ErrorIs(t, err, context.Canceled)
}

// TestListJudgesExpiryByWatching: List judges entries as Inspect does. A
// Backend that first sees a lease counts its whole TTL left, however old
// the lease; once it has watched the lease unchanged for its TTL, List
// leaves it out, and Waiters no longer counts an expired place.
func TestListJudgesExpiryByWatching(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	holder := newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix})
	const ttl = 10 * time.Second
	_, err := holder.Acquire(ctx, driver.Request{Name: "job", Owner: "holder", TTL: ttl, Kind: driver.Exclusive})
	require.NoError(t, err)
	_, err = holder.Acquire(ctx, driver.Request{Name: "job", Owner: "waiter", TTL: ttl, Kind: driver.Exclusive, Place: ttl})
	require.ErrorIs(t, err, lock.ErrHeld)

	viewer := newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix})
	var shift atomic.Int64
	fenceddb.SetClock(viewer, func() time.Time { return time.Now().Add(time.Duration(shift.Load())) })
	infos, err := viewer.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 1, len(infos))
	require.True(t, infos[0].Holders[0].TTL > ttl-2*time.Second, infos[0].Holders[0].TTL)
	counts, err := viewer.Waiters(ctx, []string{"job"})
	require.NoError(t, err)
	require.Equal(t, []int64{1}, counts)

	// The viewer's clock runs on by more than the TTL: what it watched
	// unchanged has run out.
	shift.Store(int64(2 * ttl))
	infos, err = viewer.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 0, len(infos), infos)
	counts, err = viewer.Waiters(ctx, []string{"job"})
	require.NoError(t, err)
	require.Equal(t, []int64{0}, counts)
}

// TestPermitNames runs fencectl's check of PermitNames: the names in use
// under a prefix, sorted, a freed one left out.
func TestPermitNames(t *testing.T) {
	srv := server(t)
	b := newBackend(t, srv, nil)
	fencectltest.PermitNames(t, b, b.PermitNames, false)
}

// TestBump: Bump raises the counter of every lock and permit name under the
// Backend's prefix by N, and no other, so that the next token of each
// name is N above its last; it refuses (nothing changed) a by that is not
// positive or that would pass fence.MaxToken.
func TestBump(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	b := newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix})
	other := newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix + "other/"})
	c, co := lock.New(b, nil), lock.New(other, nil)
	const ttl = time.Minute

	l, err := c.Acquire(ctx, "job", ttl)
	require.NoError(t, err)
	lockTok := l.Token()
	require.NoError(t, l.Release(ctx))
	p, err := c.Semaphore("pool", 2).TryAcquire(ctx, ttl)
	require.NoError(t, err)
	permitTok := p.Token()
	require.NoError(t, p.Release(ctx))
	lo, err := co.Acquire(ctx, "job", ttl)
	require.NoError(t, err)
	otherTok := lo.Token()
	require.NoError(t, lo.Release(ctx))

	for _, by := range []int64{0, -1, int64(fence.MaxToken)} {
		_, err := b.Bump(ctx, by)
		require.ErrorIs(t, err, fence.ErrInvalid, "by %d", by)
	}

	r, err := b.Bump(ctx, 1000)
	require.NoError(t, err)
	// The other Backend's items start with this one's prefix too, but are
	// not under its lock/ and permit/.
	require.Equal(t, int64(2), r.Raised)
	require.Equal(t, max(lockTok, permitTok)+1000, r.MaxCounter)

	l, err = c.Acquire(ctx, "job", ttl)
	require.NoError(t, err)
	require.Equal(t, lockTok+1001, l.Token())
	require.NoError(t, l.Release(ctx))
	p, err = c.Semaphore("pool", 2).TryAcquire(ctx, ttl)
	require.NoError(t, err)
	require.Equal(t, permitTok+1001, p.Token())
	require.NoError(t, p.Release(ctx))
	lo, err = co.Acquire(ctx, "job", ttl)
	require.NoError(t, err)
	require.Equal(t, otherTok+1, lo.Token(), "another prefix's counter moved")
	require.NoError(t, lo.Release(ctx))

	// The refused bumps changed nothing: the counters moved by 1000 once.
	_, err = b.Bump(ctx, int64(fence.MaxToken)-int64(lockTok)-1001+1)
	require.ErrorIs(t, err, fence.ErrInvalid)
	l, err = c.Acquire(ctx, "job", ttl)
	require.NoError(t, err)
	require.Equal(t, lockTok+1002, l.Token())
	require.NoError(t, l.Release(ctx))
}

// TestBumpRacesAGrant: a grant that read the item before a bump and
// writes after it cannot mint a token below the bumped counter: the bump
// changes the revision the grant's write is conditional on, so the grant
// reads again.
func TestBumpRacesAGrant(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	var bumped atomic.Bool
	var b *fenceddb.Backend
	hook := &afterGet{API: srv.Client(), once: func(ctx context.Context) {
		// Between the grant's read and its write.
		if _, err := b.Bump(ctx, 1000); err != nil {
			t.Errorf("bump: %v", err)
		}
		bumped.Store(true)
	}}
	var err error
	b, err = fenceddb.NewBackend(scanning{hook, srv.Client()}, testTable, &fenceddb.BackendOptions{Prefix: prefix})
	require.NoError(t, err)
	g, err := b.Acquire(ctx, driver.Request{Name: "job", Owner: "a", TTL: time.Minute, Kind: driver.Exclusive})
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, driver.Claim{Name: "job", Owner: "a", Kind: driver.Exclusive}))

	hook.armed.Store(true)
	g2, err := b.Acquire(ctx, driver.Request{Name: "job", Owner: "b", TTL: time.Minute, Kind: driver.Exclusive})
	require.NoError(t, err)
	require.True(t, bumped.Load(), "the bump did not run between the read and the write")
	require.Equal(t, g.Token+1001, g2.Token)
}

// afterGet runs once, the first time after it is armed, after a GetItem.
type afterGet struct {
	fenceddb.API
	armed atomic.Bool
	once  func(ctx context.Context)
}

func (a *afterGet) GetItem(ctx context.Context, in *awsddb.GetItemInput, opts ...func(*awsddb.Options)) (*awsddb.GetItemOutput, error) {
	out, err := a.API.GetItem(ctx, in, opts...)
	if err == nil && a.armed.CompareAndSwap(true, false) {
		a.once(ctx)
	}
	return out, err
}

// scanning adds a Scan to an API.
type scanning struct {
	fenceddb.API
	fenceddb.ScanAPI
}

// TestAdminNeedsScan: on a client without Scan, List, PermitNames and
// Bump say so (errors.ErrUnsupported); Waiters needs none.
func TestAdminNeedsScan(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	b, err := fenceddb.NewBackend(lockPathsOnly{srv.Client()}, testTable, &fenceddb.BackendOptions{Prefix: testkit.Namespace(t) + "/"})
	require.NoError(t, err)
	_, err = b.List(ctx, "")
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorContains(t, err, "ScanAPI")
	_, err = b.PermitNames(ctx, "")
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = b.Bump(ctx, 10)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	counts, err := b.Waiters(ctx, []string{"x"})
	require.NoError(t, err)
	require.Equal(t, []int64{0}, counts)
}

// TestRestoreRunbook: the runbook of docs/operations.md ("After a
// restore") on the Backend's items. A backup of them is taken (a copy of
// every item under the prefix), tokens are issued after it, and the copy
// is written back, as a restore would: the next token is one already
// issued. Bump by more than the tokens issued since the backup, and every
// next token is above every earlier one.
func TestRestoreRunbook(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	api := srv.Client()
	c := lock.New(newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix}), nil)
	const ttl = time.Minute
	take := func(c *lock.Client) fence.Token {
		t.Helper()
		l, err := c.Acquire(ctx, "job", ttl)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		return l.Token()
	}
	take(c)
	// A Scan reads at most 1 MB per page, before the filter: the shared
	// table holds other tests' items, so every page is read.
	var backup []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for {
		page, err := api.Scan(ctx, &awsddb.ScanInput{
			TableName:                 aws.String(testTable),
			ExclusiveStartKey:         start,
			FilterExpression:          aws.String("begins_with(#k, :p)"),
			ExpressionAttributeNames:  map[string]string{"#k": fenceddb.KeyAttribute},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: prefix}},
			ConsistentRead:            aws.Bool(true),
		})
		require.NoError(t, err)
		backup = append(backup, page.Items...)
		if page.LastEvaluatedKey == nil {
			break
		}
		start = page.LastEvaluatedKey
	}
	require.Equal(t, 1, len(backup))
	var highest fence.Token
	for range 5 {
		highest = take(c)
	}

	// The restore; the processes start anew (a new Backend).
	for _, it := range backup {
		_, err := api.PutItem(ctx, &awsddb.PutItemInput{TableName: aws.String(testTable), Item: it})
		require.NoError(t, err)
	}
	b := newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix})
	c = lock.New(b, nil)
	require.True(t, take(c) <= highest, "without a bump a restored counter reissues a token")

	// The runbook: bump by more than the tokens issued since the backup.
	r, err := b.Bump(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Raised)
	require.True(t, r.MaxCounter > highest, "counter %d, highest token issued %d", r.MaxCounter, highest)
	require.True(t, take(c) > highest)
}
