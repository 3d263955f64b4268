package etcd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// keyUnescaper undoes keyEscaper.
var keyUnescaper = strings.NewReplacer("%2F", "/", "%25", "%")

// List returns the locks held now whose names start with prefix ("" for
// all), sorted by name, each with its holder: owner, token, remaining TTL
// and metadata. The lock and metadata keys are read in one Txn (one
// revision); then each lock's remaining TTL is one LeaseTimeToLive, rounded
// down to whole seconds as in Inspect, and a lock whose lease ended
// meanwhile is left out. It leaves Waiting 0: Waiters counts the places in
// line. It is meant for operators (fencectl), not for hot paths.
func (b *Backend) List(ctx context.Context, prefix string) ([]lock.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	locks, metas := b.prefix+"lock/", b.prefix+"meta/"
	resp, err := b.client.Txn(ctx).Then(
		clientv3.OpGet(locks+escapeKey(prefix), clientv3.WithPrefix()),
		clientv3.OpGet(metas+escapeKey(prefix), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, opError(ctx, "list", prefix, err)
	}
	md := map[string]string{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		md[string(kv.Key[len(metas):])] = string(kv.Value)
	}
	var infos []lock.Info
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		escaped := string(kv.Key[len(locks):])
		info := lock.Info{Name: keyUnescaper.Replace(escaped)}
		h := lock.Holder{Owner: string(kv.Value), Token: fence.Token(kv.CreateRevision), Metadata: md[escaped]}
		ttl, err := b.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && ttl.TTL < 0) {
			continue // ended after the read, and the key with it
		}
		if err != nil {
			return nil, opError(ctx, "list", prefix, fmt.Errorf("lease of %q: %w", info.Name, err))
		}
		h.TTL = max(time.Duration(ttl.TTL)*time.Second, time.Millisecond)
		info.Holders = []lock.Holder{h}
		infos = append(infos, info)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	return infos, nil
}

// PermitNames returns the permit names (semaphores and read-write locks)
// whose names start with prefix ("" for all) and that have a permit or a
// place in line (a key under "h/" or "q/" of PermitKey), sorted by name,
// read in one range read of keys only. It is meant for operators
// (fencectl): Inspect each name with a permit kind for its holders.
func (b *Backend) PermitNames(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	under := b.prefix + "permit/"
	resp, err := b.client.Get(ctx, under+escapeKey(prefix), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, opError(ctx, "list permit names", prefix, err)
	}
	seen := map[string]bool{}
	var names []string
	for _, kv := range resp.Kvs {
		esc, rest, ok := strings.Cut(string(kv.Key[len(under):]), "/")
		if !ok || !(strings.HasPrefix(rest, "h/") || strings.HasPrefix(rest, "q/")) {
			continue // the guard and the last writer outlive the permits
		}
		if name := keyUnescaper.Replace(esc); !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}
