// Package wirestore is a fence.Store and lock.Backend served over TCP: a
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
	"github.com/fencekit/fencekit/lock"
)

// request is one call on the wire.
type request struct {
	Op    string        `json:"op"`
	Key   string        `json:"key,omitempty"` // a store key or a lock name
	Token fence.Token   `json:"token,omitempty"`
	Value []byte        `json:"value,omitempty"`
	Owner string        `json:"owner,omitempty"`
	TTL   time.Duration `json:"ttl,omitempty"`
	// Permit is AcquirePermit's request (permits.go).
	Permit *lock.PermitRequest `json:"permit,omitempty"`
}

// Error kinds on the wire.
const (
	kindStale    = "stale"
	kindNotFound = "notfound"
	kindHeld     = "held"
	kindNotHeld  = "notheld"
	kindInvalid  = "invalid"
	kindOther    = "other"
)

// reply is one answer on the wire.
type reply struct {
	Kind  string        `json:"kind,omitempty"` // empty on success
	Msg   string        `json:"msg,omitempty"`
	Fence fence.Token   `json:"fence,omitempty"`
	Token fence.Token   `json:"token,omitempty"`
	Value []byte        `json:"value,omitempty"`
	Found bool          `json:"found,omitempty"`
	Info  *lock.Info    `json:"info,omitempty"`
	TTL   time.Duration `json:"ttl,omitempty"`
	// Permit and Permits are the replies of the permit calls.
	Permit  *lock.Permit  `json:"grant,omitempty"`
	Permits *lock.Permits `json:"permits,omitempty"`
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
	case "acquire":
		r.Token, err = s.backend.Acquire(ctx, req.Key, req.Owner, req.TTL)
	case "extend":
		err = s.backend.Extend(ctx, req.Key, req.Owner, req.TTL)
	case "release":
		err = s.backend.Release(ctx, req.Key, req.Owner)
	case "inspect":
		var info lock.Info
		info, err = s.backend.Inspect(ctx, req.Key)
		r.Info = &info
	case "acquire-permit", "extend-permit", "release-permit", "leave-permit", "inspect-permits":
		r, err = s.executePermit(ctx, req)
	default:
		err = errors.New("unknown op " + req.Op)
	}
	if err == nil {
		return r
	}
	r.Msg = err.Error()
	var stale *fence.StaleError
	var held *lock.HeldError
	switch {
	case errors.As(err, &stale):
		r.Kind, r.Fence = kindStale, stale.Fence
	case errors.Is(err, fence.ErrNotFound):
		r.Kind = kindNotFound
	case errors.As(err, &held):
		r.Kind, r.TTL = kindHeld, held.TTL
	case errors.Is(err, lock.ErrNotHeld):
		r.Kind = kindNotHeld
	case errors.Is(err, fence.ErrInvalid):
		r.Kind = kindInvalid
	default:
		r.Kind = kindOther
	}
	return r
}
