package wirestore

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/lock"
)

var _ lock.PermitBackend = (*Client)(nil)

// executePermit runs one permit call on the server's memory backend.
func (s *Server) executePermit(ctx context.Context, req request) (reply, error) {
	var r reply
	var err error
	switch req.Op {
	case "acquire-permit":
		if req.Permit == nil {
			return r, lock.ErrInvalid
		}
		var p lock.Permit
		p, err = s.backend.AcquirePermit(ctx, req.Key, req.Owner, *req.Permit)
		r.Permit = &p
	case "extend-permit":
		err = s.backend.ExtendPermit(ctx, req.Key, req.Owner, req.TTL)
	case "release-permit":
		err = s.backend.ReleasePermit(ctx, req.Key, req.Owner)
	case "leave-permit":
		err = s.backend.LeavePermitLine(ctx, req.Key, req.Owner)
	case "inspect-permits":
		var ps lock.Permits
		ps, err = s.backend.InspectPermits(ctx, req.Key)
		r.Permits = &ps
	}
	return r, err
}

// AcquirePermit takes a permit, or keeps owner's place in line.
func (c *Client) AcquirePermit(ctx context.Context, name, owner string, req lock.PermitRequest) (lock.Permit, error) {
	if err := lock.ValidatePermit(name, owner, req); err != nil {
		return lock.Permit{}, err
	}
	if c.defects.RemintPermits {
		if _, err := c.call(ctx, request{Op: "release-permit", Key: name, Owner: owner}, false); err != nil {
			return lock.Permit{}, err
		}
	}
	r, err := c.call(ctx, request{Op: "acquire-permit", Key: name, Owner: owner, Permit: &req}, true)
	if err != nil {
		return lock.Permit{}, err
	}
	if err := c.lockError(r, name); err != nil {
		return lock.Permit{}, err
	}
	if r.Permit == nil {
		return lock.Permit{}, c.lockError(reply{Kind: kindOther, Msg: "no permit in the reply"}, name)
	}
	return *r.Permit, nil
}

// ExtendPermit renews owner's permit.
func (c *Client) ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return err
	}
	r, err := c.call(ctx, request{Op: "extend-permit", Key: name, Owner: owner, TTL: ttl}, true)
	if err != nil {
		return err
	}
	return c.lockError(r, name)
}

// ReleasePermit gives up owner's permit.
func (c *Client) ReleasePermit(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	r, err := c.call(ctx, request{Op: "release-permit", Key: name, Owner: owner}, c.defects.ResendWrites)
	if err != nil {
		return err
	}
	return c.lockError(r, name)
}

// LeavePermitLine gives up owner's place.
func (c *Client) LeavePermitLine(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	r, err := c.call(ctx, request{Op: "leave-permit", Key: name, Owner: owner}, true)
	if err != nil {
		return err
	}
	return c.lockError(r, name)
}

// AwaitPermit has no wake-up to wait for on this wire: it waits a little
// (at most max) and lets the caller ask again, which the contract allows.
func (c *Client) AwaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	t := time.NewTimer(min(max, 20*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// InspectPermits reports the permits on name.
func (c *Client) InspectPermits(ctx context.Context, name string) (lock.Permits, error) {
	if err := lock.ValidateName(name, "inspect"); err != nil {
		return lock.Permits{}, err
	}
	r, err := c.call(ctx, request{Op: "inspect-permits", Key: name}, true)
	if err != nil {
		return lock.Permits{}, err
	}
	if err := c.lockError(r, name); err != nil {
		return lock.Permits{}, err
	}
	if r.Permits == nil {
		return lock.Permits{}, c.lockError(reply{Kind: kindOther, Msg: "no permits in the reply"}, name)
	}
	return *r.Permits, nil
}
