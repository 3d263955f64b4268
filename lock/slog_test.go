package lock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// syncBuffer is a bytes.Buffer safe for the keep-alive's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// records decodes the JSON records written so far.
func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func jsonLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// wantRecord fails unless rec has msg, level and every attribute in attrs
// (numbers as JSON decodes them), and no attribute outside attrs but the
// allowed ones.
func wantRecord(t *testing.T, rec map[string]any, msg, level string, attrs map[string]any) {
	t.Helper()
	if rec["msg"] != msg || rec["level"] != level {
		t.Errorf("record %v: want msg %q level %s", rec, msg, level)
	}
	for k, v := range attrs {
		if rec[k] != v {
			t.Errorf("record %q: %s = %v; want %v", msg, k, rec[k], v)
		}
	}
	for k := range rec {
		if _, ok := attrs[k]; !ok && k != "time" && k != "level" && k != "msg" && k != "error" {
			t.Errorf("record %q: unexpected attribute %s = %v", msg, k, rec[k])
		}
	}
}

// One record per event, with the lock, token, metadata, key and cause.
func TestSlogObserverRecords(t *testing.T) {
	var buf syncBuffer
	ctx := context.Background()
	b, store := memory.NewBackend(), memory.NewStore()
	client := lock.New(b, &lock.Options{Metadata: "host=a pid=1", Observer: lock.SlogObserver(jsonLogger(&buf)), MaxAttempts: 2, MinBackoff: time.Millisecond})

	lease, err := client.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok := float64(lease.Token())
	if err := lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := store.Advance(ctx, "k", lease.Token()+5); err != nil {
		t.Fatal(err)
	}
	if err := lease.Fenced(store).Put(ctx, "k", nil); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Put = %v; want stale", err)
	}
	if _, err := client.Acquire(ctx, "job", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("second Acquire = %v; want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	recs := buf.records(t)
	if len(recs) != 5 {
		t.Fatalf("%d records; want 5: %v", len(recs), recs)
	}
	md := "host=a pid=1"
	wantRecord(t, recs[0], "lock acquired", "INFO", map[string]any{"lock": "job", "token": tok, "metadata": md, "attempt": float64(1), "elapsed": recs[0]["elapsed"]})
	if el, ok := recs[0]["elapsed"].(float64); !ok || el <= 0 {
		t.Errorf("acquired record's elapsed = %v; want a positive duration", recs[0]["elapsed"])
	}
	wantRecord(t, recs[1], "lock extended", "DEBUG", map[string]any{"lock": "job", "token": tok, "metadata": md})
	wantRecord(t, recs[2], "lock stale", "WARN", map[string]any{"lock": "job", "token": tok, "metadata": md, "key": "k", "cause": "stale"})
	wantRecord(t, recs[3], "lock retrying", "DEBUG", map[string]any{"lock": "job", "metadata": md, "cause": "held", "attempt": float64(1)})
	wantRecord(t, recs[4], "lock released", "INFO", map[string]any{"lock": "job", "token": tok, "metadata": md})
}

// A lease lost at its local deadline is logged with cause deadline; one
// that the backend no longer holds, with cause not-held.
func TestSlogObserverLossCauses(t *testing.T) {
	var buf syncBuffer
	ctx := context.Background()
	b := memory.NewBackend()
	client := lock.New(b, &lock.Options{Observer: lock.SlogObserver(jsonLogger(&buf))})

	short, err := client.TryAcquire(ctx, "short", 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-short.Done()

	taken, err := client.TryAcquire(ctx, "taken", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := releaseLock(ctx, b, "taken", taken.Owner()); err != nil { // an operator's force-release
		t.Fatal(err)
	}
	if err := taken.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend = %v; want ErrNotHeld", err)
	}
	var causes []string
	for _, r := range buf.records(t) {
		if r["msg"] == "lock lost" {
			causes = append(causes, r["lock"].(string)+":"+r["cause"].(string))
			if r["error"] == nil {
				t.Errorf("lost record without error: %v", r)
			}
		}
	}
	if strings.Join(causes, " ") != "short:deadline taken:not-held" {
		t.Fatalf("lost records %v; want short:deadline taken:not-held", causes)
	}
}

// A nil logger means slog.Default, and a disabled level costs no record.
func TestSlogObserverLevels(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	obs := lock.SlogObserver(logger)
	obs.Acquired(lock.Event{Name: "x", Token: 1})
	obs.Lost(lock.Event{Name: "x", Token: 1, Err: lock.ErrNotHeld})
	recs := buf.records(t)
	if len(recs) != 1 || recs[0]["msg"] != "lock lost" || recs[0]["cause"] != "not-held" {
		t.Fatalf("records %v; want only the lost one", recs)
	}

	var def syncBuffer
	old := slog.Default()
	slog.SetDefault(jsonLogger(&def))
	defer slog.SetDefault(old)
	lock.SlogObserver(nil).Acquired(lock.Event{Name: "x", Token: 1})
	if recs := def.records(t); len(recs) != 1 || recs[0]["msg"] != "lock acquired" {
		t.Fatalf("a nil logger wrote %v to slog.Default; want the acquired record", recs)
	}
}

// Each field of SlogObserver logs its own kind, at its level, whatever
// Event it is handed; none is left nil.
func TestSlogObserverMessages(t *testing.T) {
	var buf syncBuffer
	obs := lock.SlogObserver(jsonLogger(&buf))
	fields := reflect.ValueOf(*obs)
	for i := range fields.NumField() {
		if fields.Field(i).IsNil() {
			t.Errorf("SlogObserver leaves Observer.%s nil", fields.Type().Field(i).Name)
		}
	}
	for _, tc := range []struct {
		field func(lock.Event)
		msg   string
		level string
	}{
		{obs.Acquired, "lock acquired", "INFO"},
		{obs.Extended, "lock extended", "DEBUG"},
		{obs.Released, "lock released", "INFO"},
		{obs.Lost, "lock lost", "WARN"},
		{obs.Stale, "lock stale", "WARN"},
		{obs.RenewalFailed, "lock renewal-failed", "WARN"},
		{obs.Retrying, "lock retrying", "DEBUG"},
	} {
		tc.field(lock.Event{Name: "x"})
		recs := buf.records(t)
		if rec := recs[len(recs)-1]; rec["msg"] != tc.msg || rec["level"] != tc.level {
			t.Errorf("record %v; want msg %q level %s", rec, tc.msg, tc.level)
		}
	}
	if n := len(buf.records(t)); n != fields.NumField() {
		t.Errorf("%d records for %d fields", n, fields.NumField())
	}
}

// ReportStale reaches the Observer of the lease in the context (as Do's
// function gets it), with the refused token; without a lease it does
// nothing.
func TestReportStale(t *testing.T) {
	var mu sync.Mutex
	var stale []lock.Event
	obs := &lock.Observer{Stale: func(e lock.Event) {
		mu.Lock()
		stale = append(stale, e)
		mu.Unlock()
	}}
	client := lock.New(memory.NewBackend(), &lock.Options{Observer: obs})
	refused := fence.Stale("row id=7", 3, 9)
	err := client.Do(context.Background(), "job", time.Minute, func(ctx context.Context, lease *lock.Lease) error {
		if lock.LeaseFromContext(ctx) != lease {
			t.Error("Do's context does not carry its lease")
		}
		if got := lock.ReportStale(ctx, "row id=7", refused); got != refused {
			t.Errorf("ReportStale changed the error: %v", got)
		}
		_ = lock.ReportStale(ctx, "other", errors.New("not stale"))
		_ = lock.ReportStale(context.Background(), "no lease", refused)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stale) != 1 || stale[0].Key != "row id=7" || stale[0].Token != 3 || stale[0].Name != "job" || !errors.Is(stale[0].Err, fence.ErrStale) {
		t.Fatalf("stale events %+v; want one for row id=7 with token 3", stale)
	}
}

// SlogObserver logs each event of a lease as one structured record.
func ExampleSlogObserver() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "elapsed" {
				return slog.Attr{} // keep the example's output stable
			}
			return a
		},
	}))
	client := lock.New(memory.NewBackend(), &lock.Options{Metadata: "worker-7", Observer: lock.SlogObserver(logger)})
	ctx := context.Background()
	lease, _ := client.TryAcquire(ctx, "invoice/42", time.Minute)
	_ = lease.Release(ctx)
	// Output:
	// level=INFO msg="lock acquired" lock=invoice/42 token=1 metadata=worker-7 attempt=1
	// level=INFO msg="lock released" lock=invoice/42 token=1 metadata=worker-7
}
