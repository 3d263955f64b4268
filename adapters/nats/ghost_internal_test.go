package nats

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
)

// TestGhostPlacesDropped: a replica restarted after a kill -9 can keep
// places whose TTL ran out on the stream's leader (see dropGhosts), and a
// line read from it shows them ahead of every waiter, for ever. A place
// read long past its TTL is checked on the leader: one the leader no
// longer has at that revision is dropped from the line and from later
// reads; one the leader still has stays (the leader decides, whatever
// this machine's clock says). The replica's answer is made up here: the
// places' revisions and times are as such a replica would show them.
func TestGhostPlacesDropped(t *testing.T) {
	c := natstest.Single(t)
	_, js := natstest.Connect(t, c.URLs())
	bucket := natstest.Bucket(t, js, 1)
	ctx := context.Background()
	b, err := NewBackend(ctx, js, bucket, &BackendOptions{Prefix: "ghosts"})
	if err != nil {
		t.Fatal(err)
	}
	const name, owner = "l", "owner"
	// A place that expired on the leader: written, then removed (the
	// marker of an expiry and a delete leave the same last message: not
	// this revision).
	ghostKey := b.PlaceKey(name, "gone")
	ghostSeq, err := b.b.write(ctx, ghostKey, 0, nil, []byte("gone"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.b.write(ctx, ghostKey, ghostSeq, natsgo.Header{kvOpHeader: []string{"DEL"}}, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	// A place the leader still has, though its message's time says its
	// TTL ran out long ago (this machine's clock ahead of the server's).
	liveKey := b.PlaceKey(name, "live")
	liveSeq, err := b.b.write(ctx, liveKey, 0, nil, []byte("live"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Minute)
	ln := line{places: []place{
		{subject: b.b.subject + ghostKey, seq: ghostSeq, arrival: ghostSeq, owner: "gone", written: long, ttl: time.Second},
		{subject: b.b.subject + liveKey, seq: liveSeq, arrival: liveSeq, owner: "live", written: long, ttl: time.Second},
	}}
	b.waker.open(name, owner)
	defer b.waker.close(name, owner)
	if err := b.dropGhosts(ctx, name, owner, &ln); err != nil {
		t.Fatal(err)
	}
	if len(ln.places) != 1 || ln.places[0].owner != "live" {
		t.Fatalf("places after dropGhosts: %+v; want only the live one", ln.places)
	}
	if g := b.waker.gone(name)[b.b.subject+ghostKey]; g < ghostSeq {
		t.Errorf("the ghost's revision %d is not noted as gone (%d): a later read from the replica would show it again", ghostSeq, g)
	}
	if g := b.waker.gone(name)[b.b.subject+liveKey]; g >= liveSeq {
		t.Errorf("the live place's revision %d is noted as gone", liveSeq)
	}
}
