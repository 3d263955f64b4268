package wirestore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// Defects are deliberate bugs a Client can have, so that tests can show a
// fault check catching them. The zero value is a correct client.
type Defects struct {
	// ResendWrites sends a write (Put, Delete, Advance, Release) again on a
	// new connection after a network error, as a client library with
	// automatic retries does.
	ResendWrites bool
	// IgnoreContext bounds each call by a fixed socket timeout of 3 s, as
	// go-redis does by default, instead of by the context's deadline.
	IgnoreContext bool
	// SwallowErrors reports a write that failed on the network as done.
	SwallowErrors bool
	// ReadFirst is no defect: every write first reads the key (a get, and
	// waits for its reply), as a store that compares on the client side
	// does, so a write is two requests.
	ReadFirst bool
	// RemintPermits makes an Acquire of a permit release the owner's
	// permit before asking for one, as a client that starts every attempt
	// afresh does: a retry after a lost reply gets a new token.
	RemintPermits bool
}

// resends is how many times a call is sent again after a network error when
// it may be (reads, Acquire, Extend and Leave always; writes with
// ResendWrites).
const resends = 3

// socketTimeout is the fixed timeout of a client with IgnoreContext.
const socketTimeout = 3 * time.Second

// Client is a fence.Store and a driver.Backend on a Server, over one
// connection at a time made with its dial function. As the driver contract
// allows, it sends lock requests as they come: the lock.Client checked
// them.
type Client struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	addr    string
	defects Defects

	mu   sync.Mutex // one call at a time
	conn net.Conn
	rd   *bufio.Reader
}

var (
	_ fence.Store    = (*Client)(nil)
	_ driver.Backend = (*Client)(nil)
)

// NewClient returns a Client for the server at addr that connects with dial.
func NewClient(addr string, dial func(ctx context.Context, network, addr string) (net.Conn, error), defects Defects) *Client {
	return &Client{dial: dial, addr: addr, defects: defects}
}

// Close closes the client's connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop()
	return nil
}

func (c *Client) drop() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn, c.rd = nil, nil
	}
}

// call sends req and returns the reply. A network error drops the
// connection; the call is then sent again when resend allows.
func (c *Client) call(ctx context.Context, req request, resend bool) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	attempts := 1
	if resend {
		attempts += resends
	}
	var err error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		var r reply
		r, err = c.roundTrip(ctx, req)
		if err == nil {
			return r, nil
		}
		c.drop()
		if cerr := ended(ctx); cerr != nil && !c.defects.IgnoreContext {
			return reply{}, fmt.Errorf("wirestore: %s: %w (%v)", req.Op, cerr, err)
		}
	}
	return reply{}, fmt.Errorf("wirestore: %s: %w", req.Op, err)
}

// ended returns ctx's error, or DeadlineExceeded once its deadline has
// passed: the socket deadline, set to the same instant, can fire before the
// context's own timer does.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// roundTrip sends req once on the current connection, dialling one if
// needed.
func (c *Client) roundTrip(ctx context.Context, req request) (reply, error) {
	if c.conn == nil {
		conn, err := c.dial(ctx, "tcp", c.addr)
		if err != nil {
			return reply{}, err
		}
		c.conn, c.rd = conn, bufio.NewReader(conn)
	}
	if c.defects.IgnoreContext {
		_ = c.conn.SetDeadline(time.Now().Add(socketTimeout))
	} else {
		dl, _ := ctx.Deadline()
		_ = c.conn.SetDeadline(dl)
		conn := c.conn // c.conn is cleared when the call fails
		stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	line, err := json.Marshal(req)
	if err != nil {
		return reply{}, err
	}
	if _, err := c.conn.Write(append(line, '\n')); err != nil {
		return reply{}, err
	}
	b, err := c.rd.ReadBytes('\n')
	if err != nil {
		return reply{}, err
	}
	var r reply
	if err := json.Unmarshal(b, &r); err != nil {
		return reply{}, err
	}
	return r, nil
}

// write sends one fenced write.
func (c *Client) write(ctx context.Context, op, key string, token fence.Token, value []byte) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	if c.defects.ReadFirst {
		if _, err := c.call(ctx, request{Op: "get", Key: key}, true); err != nil {
			return err
		}
	}
	r, err := c.call(ctx, request{Op: op, Key: key, Token: token, Value: value}, c.defects.ResendWrites)
	if err != nil {
		if c.defects.SwallowErrors {
			return nil
		}
		return err
	}
	return c.storeError(r, key, token)
}

func (c *Client) storeError(r reply, key string, token fence.Token) error {
	switch r.Kind {
	case "":
		return nil
	case kindStale:
		return fence.Stale(key, token, r.Fence)
	case kindNotFound:
		return fmt.Errorf("%w: %q", fence.ErrNotFound, key)
	case kindInvalid:
		return fence.Invalid("%s", r.Msg)
	}
	return errors.New("wirestore: " + r.Msg)
}

func (c *Client) lockError(r reply, name string) error {
	switch r.Kind {
	case "":
		return nil
	case kindHeld:
		return &driver.HeldError{Name: r.Name, TTL: r.TTL, Kind: r.LeaseKind, Permits: r.Permits}
	case kindNotHeld:
		return driver.NotHeld(name)
	case kindShape:
		return fmt.Errorf("%w: %s", driver.ErrShapeMismatch, r.Msg)
	case kindNotAtomic:
		return fmt.Errorf("%w: %s", driver.ErrNotAtomic, r.Msg)
	case kindInvalid:
		return driver.Invalid("%s", strings.TrimPrefix(r.Msg, "lock: invalid argument: "))
	}
	return errors.New("wirestore: " + r.Msg)
}

// Put writes value under key if token is at least the key's fence.
func (c *Client) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return c.write(ctx, "put", key, token, value)
}

// Delete removes key's value if token is at least its fence.
func (c *Client) Delete(ctx context.Context, key string, token fence.Token) error {
	return c.write(ctx, "delete", key, token, nil)
}

// Advance raises key's fence to token.
func (c *Client) Advance(ctx context.Context, key string, token fence.Token) error {
	return c.write(ctx, "advance", key, token, nil)
}

// Get returns key's value and fence.
func (c *Client) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	r, err := c.call(ctx, request{Op: "get", Key: key}, true)
	if err != nil {
		return fence.Record{}, err
	}
	rec := fence.Record{Fence: r.Fence}
	if r.Found {
		rec.Value = append([]byte{}, r.Value...)
	}
	return rec, c.storeError(r, key, 0)
}

// Acquire asks the server's backend for what req asks, in one request.
func (c *Client) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if c.defects.RemintPermits && req.Kind.Permit() {
		claim := driver.Claim{Name: req.Name, Owner: req.Owner, Kind: req.Kind}
		if _, err := c.call(ctx, request{Op: "release", Claim: &claim}, false); err != nil {
			return driver.Grant{}, err
		}
	}
	r, err := c.call(ctx, request{Op: "acquire", Req: &req}, true)
	if err != nil {
		return driver.Grant{}, err
	}
	if err := c.lockError(r, req.Name); err != nil {
		return driver.Grant{}, err
	}
	if r.Grant == nil {
		return driver.Grant{}, c.lockError(reply{Kind: kindOther, Msg: "no grant in the reply"}, req.Name)
	}
	return *r.Grant, nil
}

// Extend renews the claimed lease.
func (c *Client) Extend(ctx context.Context, claim driver.Claim, ttl time.Duration) error {
	r, err := c.call(ctx, request{Op: "extend", Claim: &claim, TTL: ttl}, true)
	if err != nil {
		return err
	}
	return c.lockError(r, claim.Name)
}

// Release frees the claimed lease.
func (c *Client) Release(ctx context.Context, claim driver.Claim) error {
	r, err := c.call(ctx, request{Op: "release", Claim: &claim}, c.defects.ResendWrites)
	if err != nil {
		if c.defects.SwallowErrors {
			return nil
		}
		return err
	}
	return c.lockError(r, claim.Name)
}

// Await has no wake-up to wait for on this wire: it waits a little (at
// most max) and lets the caller ask again, which the contract allows.
func (c *Client) Await(ctx context.Context, _ driver.Claim, max time.Duration) error {
	t := time.NewTimer(min(max, 20*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leave gives up the claim's owner's place in line.
func (c *Client) Leave(ctx context.Context, claim driver.Claim) error {
	r, err := c.call(ctx, request{Op: "leave", Claim: &claim}, true)
	if err != nil {
		return err
	}
	return c.lockError(r, claim.Name)
}

// Inspect reports the lock (kind Exclusive) or permit name called name.
func (c *Client) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	r, err := c.call(ctx, request{Op: "inspect", Key: name, Kind: kind}, true)
	if err != nil {
		return driver.Info{}, err
	}
	if err := c.lockError(r, name); err != nil {
		return driver.Info{}, err
	}
	if r.Info == nil {
		return driver.Info{}, c.lockError(reply{Kind: kindOther, Msg: "no info in the reply"}, name)
	}
	return *r.Info, nil
}
