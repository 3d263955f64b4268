package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// A gap is a check that could not be run because the backend answered
// driver.ErrUnsupported for a shape it asked for: it is skipped, never
// passed, and listed at the end of Run.
type gap struct {
	check string // the check's name
	shape string // the shape the backend refused
}

// logGaps logs the gaps of one Run.
func logGaps(t *testing.T, gaps []gap) {
	t.Helper()
	t.Log(gapReport(gaps))
}

// gapReport lists gaps, one check a line, with the shapes refused.
func gapReport(gaps []gap) string {
	if len(gaps) == 0 {
		return "drivertest: no gaps: the backend served every shape the checks asked for"
	}
	var s strings.Builder
	fmt.Fprintf(&s, "drivertest: %d gap(s), each check skipped, not passed, because the backend answers driver.ErrUnsupported:", len(gaps))
	for _, g := range gaps {
		fmt.Fprintf(&s, "\n  %s: %s", g.check, g.shape)
	}
	return s.String()
}

// watched is the backend a check is given: the backend under test, with
// every answer of driver.ErrUnsupported noted with the shape of the call
// that got it.
type watched struct {
	driver.Backend

	mu     sync.Mutex
	shapes []string // refused shapes, first refusal first
}

func watch(b driver.Backend) *watched {
	return &watched{Backend: b}
}

// refused returns the shapes the backend refused, "" when none.
func (w *watched) refused() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.shapes, ", ")
}

func (w *watched) note(shape string, err error) {
	if !errors.Is(err, driver.ErrUnsupported) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.shapes {
		if s == shape {
			return
		}
	}
	w.shapes = append(w.shapes, shape)
}

func (w *watched) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := w.Backend.Acquire(ctx, req)
	w.note(requestShape(req), err)
	return g, err
}

func (w *watched) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	err := w.Backend.Extend(ctx, c, ttl)
	w.note(kindShape(c.Kind), err)
	return err
}

func (w *watched) Release(ctx context.Context, c driver.Claim) error {
	err := w.Backend.Release(ctx, c)
	w.note(kindShape(c.Kind), err)
	return err
}

func (w *watched) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	err := w.Backend.Await(ctx, c, max)
	w.note(kindShape(c.Kind)+inLine, err)
	return err
}

func (w *watched) Leave(ctx context.Context, c driver.Claim) error {
	err := w.Backend.Leave(ctx, c)
	w.note(kindShape(c.Kind)+inLine, err)
	return err
}

func (w *watched) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	info, err := w.Backend.Inspect(ctx, name, kind)
	w.note(kindShape(kind), err)
	return info, err
}

const inLine = " waiting in line"

// requestShape names the shape req asks for, as a gap is reported.
func requestShape(req driver.Request) string {
	switch {
	case req.Names != nil:
		return "set of locks"
	case req.Resume:
		return "resume"
	case req.Place > 0:
		return kindShape(req.Kind) + inLine
	}
	return kindShape(req.Kind)
}

// kindShape names the shape of a lease of kind k.
func kindShape(k driver.Kind) string {
	switch k {
	case driver.Exclusive:
		return "lock"
	case driver.Semaphore:
		return "semaphore"
	case driver.Read, driver.Write:
		return "read-write lock"
	}
	return k.String()
}
