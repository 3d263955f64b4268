package lab

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/servers"
	"github.com/fencekit/fencekit/lock/driver"
)

// killable is a server the chaos run takes down and brings back.
type killable interface {
	// Kill takes the server down at once; Start brings it back and waits
	// until it answers.
	Kill() error
	Start() error
}

// killedServer is what -kill-server-every runs on: servers the lab started
// itself, one of which (target) it kills during the run.
type killedServer struct {
	target killable
	addr   string // the killed server's host:port, for the proxy
	how    string // how a kill happens, for the report
	// forgets says that a kill loses every lease (a Redis without
	// persistence): another owner may then take a name whose holder's
	// lease had time left, which the chaos checker must not count.
	forgets bool
	// open opens the backend and store, with the clients of the killed
	// server dialing dial (the server's address, or the proxy's).
	open  func(ctx context.Context, dial string) (driver.Backend, fence.Store, func(), error)
	close func()
}

// killStats is what the kill loop did.
type killStats struct {
	kills       int
	down        time.Duration // total time the server was down
	longestBack time.Duration // longest Start, restart to first answer
	err         error         // a restart that failed
}

// killLoop kills target at random intervals of every/2 to 3*every/2, keeps
// it down for downtime, and starts it again, until ctx ends. It leaves the
// server running.
func killLoop(ctx context.Context, target killable, every, downtime time.Duration, seed uint64) killStats {
	rng := mrand.New(mrand.NewPCG(seed, 1<<33))
	var st killStats
	for {
		wait := every/2 + time.Duration(rng.Int64N(int64(every)+1))
		if !sleepCtx(ctx, wait) {
			return st
		}
		downAt := time.Now()
		if err := target.Kill(); err != nil {
			st.err = err
			return st
		}
		st.kills++
		sleepCtx(ctx, downtime) // the outage itself; ended early by ctx, then restart at once
		startAt := time.Now()
		if err := target.Start(); err != nil {
			st.err = fmt.Errorf("restart after kill %d: %w", st.kills, err)
			return st
		}
		st.longestBack = max(st.longestBack, time.Since(startAt))
		st.down += time.Since(downAt)
	}
}

// sleepCtx waits for d or until ctx ends, and reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (s killStats) print(w io.Writer, how string, every, downtime time.Duration) {
	avg := time.Duration(0)
	if s.kills > 0 {
		avg = s.down / time.Duration(s.kills)
	}
	fmt.Fprintf(w, "server kills: %d (%s; about every %v, down %v each), down %v in all (%v on average), longest restart %v\n",
		s.kills, how, every, downtime, s.down.Round(time.Millisecond), avg.Round(time.Millisecond), s.longestBack.Round(time.Millisecond))
}

// openKilled starts the throwaway servers for a run with server kills.
func openKilled(ctx context.Context, name string) (*killedServer, error) {
	switch name {
	case "redis":
		return openKilledRedis(ctx)
	case "postgres":
		return openKilledPostgres(ctx)
	}
	return nil, fmt.Errorf("-kill-server-every: backend %q has no server to kill (redis, postgres)", name)
}

// openKilledRedis starts two redis-servers: the leases live on the first,
// which the run kills (SIGKILL) and restarts without persistence, empty;
// the fenced counters live on the second, which stays up. A Redis without
// persistence loses everything on a restart, so fenced data on the killed
// server would lose its increments whatever the lock did: the store that
// enforces the tokens has to be a separate, durable one, and this run
// checks that it stays correct while the lock server forgets every lease
// and counter.
func openKilledRedis(ctx context.Context) (*killedServer, error) {
	var cleanups []func()
	closeAll := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	start := func() (*servers.Redis, error) {
		r, err := servers.StartRedis()
		if err != nil {
			return nil, err
		}
		cleanups = append(cleanups, r.Close)
		return r, nil
	}
	locks, err := start()
	if err != nil {
		closeAll()
		return nil, err
	}
	data, err := start()
	if err != nil {
		closeAll()
		return nil, err
	}
	return &killedServer{
		target:  locks,
		addr:    locks.Addr(),
		how:     "lock server redis-server SIGKILL, restarted without persistence; fenced data on a second redis-server",
		forgets: true,
		close:   closeAll,
		open: func(ctx context.Context, dial string) (driver.Backend, fence.Store, func(), error) {
			prefix := "fencelab_" + runID()
			lc := goredis.NewClient(&goredis.Options{Addr: dial})
			dc := goredis.NewClient(&goredis.Options{Addr: data.Addr()})
			closeClients := func() { _ = lc.Close(); _ = dc.Close() }
			if err := dc.Ping(ctx).Err(); err != nil {
				closeClients()
				return nil, nil, nil, fmt.Errorf("redis at %s: %w", data.Addr(), err)
			}
			return fenceredis.NewBackend(lc, &fenceredis.BackendOptions{Prefix: prefix}),
				fenceredis.NewStore(dc, &fenceredis.StoreOptions{Prefix: prefix}), closeClients, nil
		},
	}, nil
}

// pgImmediate kills PostgreSQL the way `pg_ctl stop -m immediate` does.
type pgImmediate struct{ *servers.Postgres }

func (p pgImmediate) Kill() error { return p.StopImmediate() }

// openKilledPostgres starts one PostgreSQL instance (synchronous_commit on)
// for leases and fenced data alike; the run stops it in immediate mode and
// starts it again, which runs crash recovery.
func openKilledPostgres(ctx context.Context) (*killedServer, error) {
	pg, err := servers.StartPostgres()
	if err != nil {
		return nil, err
	}
	hp, _, err := hostPort("postgres", pg.URL(), "5432")
	if err != nil {
		pg.Close()
		return nil, err
	}
	return &killedServer{
		target: pgImmediate{pg},
		addr:   hp,
		how:    "PostgreSQL immediate stop (SIGQUIT), restarted with crash recovery",
		close:  pg.Close,
		open: func(ctx context.Context, dial string) (driver.Backend, fence.Store, func(), error) {
			o, err := openPostgresProxied(ctx, pg.URL(), withHost(pg.URL(), dial))
			if err != nil {
				return nil, nil, nil, err
			}
			return o.backend, o.store, o.close, nil
		},
	}, nil
}

// openWithKills starts the servers for a run with kills, with the proxy in
// front of the killed one when faults is set, and opens the backend and
// store the workers use. The close function closes all of it.
func openWithKills(ctx context.Context, name string, faults bool) (*killedServer, *faultproxy.Proxy, opened, error) {
	ks, err := openKilled(ctx, name)
	if err != nil {
		return nil, nil, opened{}, err
	}
	dial := ks.addr
	var proxy *faultproxy.Proxy
	if faults {
		if proxy, err = faultproxy.Start(ks.addr); err != nil {
			ks.close()
			return nil, nil, opened{}, err
		}
		dial = proxy.Addr()
	}
	var o opened
	o.backend, o.store, o.close, err = ks.open(ctx, dial)
	if err != nil {
		if proxy != nil {
			_ = proxy.Close()
		}
		ks.close()
		return nil, nil, opened{}, err
	}
	closeClients := o.close
	o.close = func() {
		closeClients()
		if proxy != nil {
			_ = proxy.Close()
		}
		ks.close()
	}
	return ks, proxy, o, nil
}

// afterKills holds back reads that come after the kill loop was told to
// stop (over) until it has brought the server back (done), so that the
// run's final read of every counter finds the server up. Reads during the
// run go through at once and meet the outages.
type afterKills struct {
	fence.Store
	over, done <-chan struct{}
}

func (a afterKills) Get(ctx context.Context, key string) (fence.Record, error) {
	select {
	case <-a.over:
		select {
		case <-a.done:
		case <-ctx.Done():
			return fence.Record{}, ctx.Err()
		}
	default:
	}
	return a.Store.Get(ctx, key)
}
