package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// PermitKey is the prefix under which every key of the permit name name
// lives, apart from single-holder locks:
//
//	PermitKey(name) + "g"          the guard: the shape, rewritten by every grant
//	PermitKey(name) + "w"          the last writer: its mod revision
//	PermitKey(name) + "h/" + owner a holder's permit, on an etcd lease of its TTL
//	PermitKey(name) + "q/" + owner a waiter's place, on an etcd lease of its own
func (b *Backend) PermitKey(name string) string {
	return b.prefix + "permit/" + escapeKey(name) + "/"
}

// permitKeys are the keys of one permit name and one owner.
type permitKeys struct {
	all, guard, writer, holders, places, holder, place string
}

func (b *Backend) permitKeys(name, owner string) permitKeys {
	p := b.PermitKey(name)
	return permitKeys{
		all: p, guard: p + "g", writer: p + "w",
		holders: p + "h/", places: p + "q/",
		holder: p + "h/" + escapeKey(owner), place: p + "q/" + escapeKey(owner),
	}
}

// permitView is one read of a permit name: every key under its prefix, at
// one revision.
type permitView struct {
	rev     int64            // the revision the read saw
	guard   *mvccpb.KeyValue // nil when absent
	lastW   fence.Token      // the last writer: the writer key's mod revision
	holders []*mvccpb.KeyValue
	places  []*mvccpb.KeyValue // in order of create revision
}

// readPermits reads every key of name in one range read, sorted by create
// revision so that places come in line order.
func (b *Backend) readPermits(ctx context.Context, k permitKeys) (permitView, error) {
	resp, err := b.client.Txn(ctx).Then(clientv3.OpGet(k.all, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))).Commit()
	if err != nil {
		return permitView{}, err
	}
	v := permitView{rev: resp.Header.Revision}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		key := string(kv.Key)
		switch {
		case key == k.guard:
			v.guard = kv
		case key == k.writer:
			v.lastW = fence.Token(kv.ModRevision)
		case strings.HasPrefix(key, k.holders):
			v.holders = append(v.holders, kv)
		case strings.HasPrefix(key, k.places):
			v.places = append(v.places, kv)
		}
	}
	return v, nil
}

// live reports whether the name has a live permit or place: whether its
// shape binds.
func (v permitView) live() bool { return len(v.holders) > 0 || len(v.places) > 0 }

// shape is the name's shape from the guard: Semaphore and its limit, or
// Write for a read-write lock; 0 when there is no guard.
func (v permitView) shape() (driver.Kind, int, error) {
	if v.guard == nil {
		return 0, 0, nil
	}
	kind, limit, ok := parseShape(v.guard.Value)
	if !ok {
		return 0, 0, fmt.Errorf("fencekit/etcd: permit guard %q holds %q, not a shape", v.guard.Key, v.guard.Value)
	}
	return kind, limit, nil
}

func find(kvs []*mvccpb.KeyValue, key string) int {
	for i, kv := range kvs {
		if string(kv.Key) == key {
			return i
		}
	}
	return -1
}

// kindCode is how the keys write a kind: "1" for Semaphore, "2" for Read,
// "3" for Write, the codes that the adapter has always written (they are
// not driver.Kind's values), so that keys written by an earlier release, or
// by a client of one during an upgrade, read the same.
func kindCode(k driver.Kind) string {
	switch k {
	case driver.Semaphore:
		return "1"
	case driver.Read:
		return "2"
	case driver.Write:
		return "3"
	}
	return "0"
}

// kindOf reads a kindCode; 0 for anything else.
func kindOf(code string) driver.Kind {
	switch code {
	case "1":
		return driver.Semaphore
	case "2":
		return driver.Read
	case "3":
		return driver.Write
	}
	return 0
}

// shapeValue is the guard's value: "<kind> <limit>", the kind Semaphore or
// Write (a read-write lock).
func shapeValue(req driver.Request) string {
	kind := driver.Write
	if req.Kind == driver.Semaphore {
		kind = driver.Semaphore
	}
	return kindCode(kind) + " " + strconv.Itoa(req.Limit)
}

func parseShape(b []byte) (driver.Kind, int, bool) {
	ks, ls, ok := strings.Cut(string(b), " ")
	if !ok {
		return 0, 0, false
	}
	l, err := strconv.Atoi(ls)
	kind := kindOf(ks)
	return kind, l, err == nil && (kind == driver.Semaphore || kind == driver.Write)
}

// holderValue is a holder key's value: "<kind> <prior writer, padded>", so
// that a retried acquire returns the same PriorWriter.
func holderValue(kind driver.Kind, prior fence.Token) string {
	return kindCode(kind) + " " + padFence(prior)
}

func parseHolder(kv *mvccpb.KeyValue) (driver.Kind, fence.Token, error) {
	ks, ps, ok := strings.Cut(string(kv.Value), " ")
	prior, okp := parseFence([]byte(ps))
	if ps == padFence(0) {
		prior, okp = 0, true
	}
	kind := kindOf(ks)
	if !ok || !okp || kind == 0 {
		return 0, 0, fmt.Errorf("fencekit/etcd: permit holder %q holds %q, not a permit", kv.Key, kv.Value)
	}
	return kind, prior, nil
}

// placeKind is the kind a place waits for: its key's value.
func placeKind(kv *mvccpb.KeyValue) driver.Kind { return kindOf(string(kv.Value)) }
