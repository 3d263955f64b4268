package testkit

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// redisClusterSlots is the number of hash slots in Redis Cluster.
const redisClusterSlots = 16384

// RedisCluster is a throwaway Redis Cluster of local redis-server processes,
// masters only, each owning an equal share of the hash slots.
type RedisCluster struct {
	// Nodes are the masters, in slot order.
	Nodes []*RedisServer
	// Replicas are the nodes added by AddReplica.
	Replicas []*RedisServer
}

// NewRedisCluster starts a cluster of masters local redis-server processes
// for t, assigns the slots (CLUSTER ADDSLOTSRANGE), joins the nodes (CLUSTER
// MEET) and waits until every node says cluster_state:ok. Everything is
// stopped when t ends.
func NewRedisCluster(t testing.TB, masters int) *RedisCluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("testkit: a cluster needs at least one master, got %d", masters)
	}
	c := &RedisCluster{}
	for i := 0; i < masters; i++ {
		c.Nodes = append(c.Nodes, newRedisClusterNode(t))
	}
	for i, n := range c.Nodes {
		from := i * redisClusterSlots / masters
		to := (i+1)*redisClusterSlots/masters - 1
		// Distinct config epochs up front spare the nodes the collision
		// round that would otherwise follow, as redis-cli --cluster does.
		if _, err := n.Do("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			t.Fatalf("testkit: CLUSTER SET-CONFIG-EPOCH on %s: %v", n.Addr(), err)
		}
		if _, err := n.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(from), strconv.Itoa(to)); err != nil {
			t.Fatalf("testkit: CLUSTER ADDSLOTSRANGE %d %d on %s: %v", from, to, n.Addr(), err)
		}
	}
	for _, n := range c.Nodes[1:] {
		if _, err := c.Nodes[0].Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.Port())); err != nil {
			t.Fatalf("testkit: CLUSTER MEET %s: %v", n.Addr(), err)
		}
	}
	c.waitOK()
	return c
}

// newRedisClusterNode starts one cluster-enabled node on a port whose bus
// port is free too.
func newRedisClusterNode(t testing.TB) *RedisServer {
	t.Helper()
	return newRedisServer(t, func() int { return redisClusterPort(t) }, []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000",
		"--cluster-announce-ip", "127.0.0.1",
	})
}

// waitOK waits until every node says cluster_state:ok, knows every node and
// sees every slot assigned.
func (c *RedisCluster) waitOK() {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(redisClusterSlots),
		"cluster_known_nodes":    strconv.Itoa(len(c.Nodes) + len(c.Replicas)),
	}
	for _, n := range append(append([]*RedisServer{}, c.Nodes...), c.Replicas...) {
		n.waitFor("cluster_state:ok with every node and slot", func() bool {
			info, err := n.Do("CLUSTER", "INFO")
			if err != nil {
				return false
			}
			for k, v := range want {
				if redisInfoField(info, k) != v {
					return false
				}
			}
			return true
		})
	}
}

// AddReplica starts one more node, joins it to the cluster as a replica of
// the master Nodes[master] (CLUSTER REPLICATE), and waits until its
// replication link is up and every node knows it.
func (c *RedisCluster) AddReplica(t testing.TB, master int) *RedisServer {
	t.Helper()
	m := c.Nodes[master]
	id, err := m.Do("CLUSTER", "MYID")
	if err != nil {
		t.Fatalf("testkit: CLUSTER MYID on %s: %v", m.Addr(), err)
	}
	r := newRedisClusterNode(t)
	if _, err := r.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(m.Port())); err != nil {
		t.Fatalf("testkit: CLUSTER MEET %s: %v", m.Addr(), err)
	}
	// REPLICATE needs the master known to the new node: retry until the
	// handshake is done.
	r.waitFor("CLUSTER REPLICATE accepted", func() bool {
		_, err := r.Do("CLUSTER", "REPLICATE", id)
		return err == nil
	})
	c.Replicas = append(c.Replicas, r)
	r.WaitReplicating()
	m.WaitReplicas(1)
	c.waitOK()
	return r
}

// Addrs are the nodes' host:port addresses.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a new cluster client, closed when t ends.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// redisClusterPort returns a free port at most 55535 whose cluster bus port
// (port+10000) is free too.
func redisClusterPort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		p := FreePort(t, 55535)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		if err == nil {
			_ = l.Close()
			return p
		}
	}
	t.Fatalf("testkit: no free port pair for a cluster node")
	return 0
}

// NewRedisReplicated starts a throwaway primary and a replica of it (started
// with --replicaof) for t, and waits until the replica's link is up and the
// primary counts it as an online replica. Stop the replica with
// replica.Stop (and bring it back with replica.Start, then
// replica.WaitReplicating); promote it with replica.Promote.
func NewRedisReplicated(t testing.TB) (primary, replica *RedisServer) {
	t.Helper()
	primary = NewRedisServer(t)
	replica = NewRedisServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	replica.WaitReplicating()
	primary.WaitReplicas(1)
	return primary, replica
}

// WaitReplicas waits until this primary has n online replicas that have
// acknowledged everything it has sent them. Being online is not enough for
// WAIT: right after a full sync the primary starts streaming to a replica
// only once the replica's first REPLCONF ACK arrives (up to a second later),
// and until then WAIT counts it out. So this propagates a PUBLISH (which
// reaches replicas without writing a key) and waits for n replicas to
// acknowledge its offset.
func (s *RedisServer) WaitReplicas(n int) {
	s.t.Helper()
	if _, err := s.Do("PUBLISH", "__testkit:ack", "1"); err != nil {
		s.t.Fatalf("testkit: PUBLISH on %s: %v", s.Addr(), err)
	}
	s.waitFor(fmt.Sprintf("%d replicas acknowledging", n), func() bool {
		info, err := s.Do("INFO", "replication")
		if err != nil {
			return false
		}
		want, err := strconv.ParseInt(redisInfoField(info, "master_repl_offset"), 10, 64)
		if err != nil {
			return false
		}
		acked := 0
		for i := 0; ; i++ {
			v := redisInfoField(info, "slave"+strconv.Itoa(i))
			if v == "" {
				break
			}
			fields := strings.Split(v, ",")
			for _, f := range fields {
				if off, ok := strings.CutPrefix(f, "offset="); ok {
					if o, err := strconv.ParseInt(off, 10, 64); err == nil && o >= want && slices.Contains(fields, "state=online") {
						acked++
					}
				}
			}
		}
		return acked >= n
	})
}
