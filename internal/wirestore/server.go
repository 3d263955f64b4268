// Package wirestore is a fence.Store and driver.Backend served over TCP: a
// server that keeps the data in adapters/memory, and a client that reaches
// it with a dial function, one JSON line per request and per reply. It
// exists so that the fault kits' own tests can run them against a real
// network client with no external server, and show that they catch a client
// with a deliberate defect (see Defects).
package wirestore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// request is one call on the wire.
type request struct {
	Op    string        `json:"op"`
	Key   string        `json:"key,omitempty"` // a store key or a lock name
	Token fence.Token   `json:"token,omitempty"`
	Value []byte        `json:"value,omitempty"`
	TTL   time.Duration `json:"ttl,omitempty"`
	// Req is an Acquire's request, Claim what an Extend, Release or Leave
	// is about, and Kind what an Inspect asks about.
	Req   *driver.Request `json:"req,omitempty"`
	Claim *driver.Claim   `json:"claim,omitempty"`
	Kind  driver.Kind     `json:"kind,omitempty"`
}

// Error kinds on the wire.
const (
	kindStale     = "stale"
	kindNotFound  = "notfound"
	kindHeld      = "held"
	kindNotHeld   = "notheld"
	kindShape     = "shape"
	kindNotAtomic = "notatomic"
	kindInvalid   = "invalid"
	kindOther     = "other"
)

// reply is one answer on the wire.
type reply struct {
	Kind  string      `json:"kind,omitempty"` // empty on success
	Msg   string      `json:"msg,omitempty"`
	Fence fence.Token `json:"fence,omitempty"`
	Token fence.Token `json:"token,omitempty"`
	Value []byte      `json:"value,omitempty"`
	Found bool        `json:"found,omitempty"`
	// Grant and Info are the replies of Acquire and Inspect.
	Grant *driver.Grant `json:"grant,omitempty"`
	Info  *driver.Info  `json:"info,omitempty"`
	// Name, TTL, LeaseKind and Permits are a *driver.HeldError's.
	Name      string        `json:"name,omitempty"`
	TTL       time.Duration `json:"ttl,omitempty"`
	LeaseKind driver.Kind   `json:"lease_kind,omitempty"`
	Permits   int           `json:"permits,omitempty"`
}

// Server serves one memory Store and one memory Backend on a loopback port.
type Server struct {
	ln      net.Listener
	store   *memory.Store
	backend *memory.Backend
	wg      sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Start starts a Server on 127.0.0.1 and a free port. The caller must Close
// it.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, store: memory.NewStore(), backend: memory.NewBackend(), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server and waits for its goroutines.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	rd := bufio.NewReader(c)
	enc := json.NewEncoder(c)
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			return
		}
		var req request
		if err := json.Unmarshal(line, &req); err != nil {
			return
		}
		if err := enc.Encode(s.execute(req)); err != nil {
			return
		}
	}
}

// execute runs one request to completion: the server never abandons a
// request its client gave up on.
func (s *Server) execute(req request) reply {
	ctx := context.Background()
	var r reply
	var err error
	switch req.Op {
	case "put":
		err = s.store.Put(ctx, req.Key, req.Token, req.Value)
	case "delete":
		err = s.store.Delete(ctx, req.Key, req.Token)
	case "advance":
		err = s.store.Advance(ctx, req.Key, req.Token)
	case "get":
		var rec fence.Record
		rec, err = s.store.Get(ctx, req.Key)
		r.Value, r.Fence, r.Found = rec.Value, rec.Fence, err == nil
	case "acquire", "extend", "release", "leave", "inspect":
		r, err = s.executeLock(ctx, req)
	default:
		err = errors.New("unknown op " + req.Op)
	}
	if err == nil {
		return r
	}
	r.Msg = err.Error()
	var stale *fence.StaleError
	var held *driver.HeldError
	switch {
	case errors.As(err, &stale):
		r.Kind, r.Fence = kindStale, stale.Fence
	case errors.Is(err, fence.ErrNotFound):
		r.Kind = kindNotFound
	case errors.As(err, &held):
		r.Kind, r.Name, r.TTL, r.LeaseKind, r.Permits = kindHeld, held.Name, held.TTL, held.Kind, held.Permits
	case errors.Is(err, driver.ErrNotHeld):
		r.Kind = kindNotHeld
	case errors.Is(err, driver.ErrShapeMismatch):
		r.Kind = kindShape
	case errors.Is(err, driver.ErrNotAtomic):
		r.Kind = kindNotAtomic
	case errors.Is(err, fence.ErrInvalid):
		r.Kind = kindInvalid
	default:
		r.Kind = kindOther
	}
	return r
}

// executeLock runs one lock call on the server's memory backend. A call
// without its request or claim is invalid.
func (s *Server) executeLock(ctx context.Context, req request) (reply, error) {
	var r reply
	if req.Op == "inspect" {
		info, err := s.backend.Inspect(ctx, req.Key, req.Kind)
		r.Info = &info
		return r, err
	}
	if req.Op == "acquire" {
		if req.Req == nil {
			return r, driver.ErrInvalid
		}
		g, err := s.backend.Acquire(ctx, *req.Req)
		r.Grant = &g
		return r, err
	}
	if req.Claim == nil {
		return r, driver.ErrInvalid
	}
	switch req.Op {
	case "extend":
		return r, s.backend.Extend(ctx, *req.Claim, req.TTL)
	case "release":
		return r, s.backend.Release(ctx, *req.Claim)
	}
	return r, s.backend.Leave(ctx, *req.Claim)
}
