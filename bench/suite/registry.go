package suite

import (
	"sort"
	"testing"
)

// Kind says which number heads a group's table.
type Kind int

const (
	// Latency groups run one goroutine; the headline is ns/op.
	Latency Kind = iota
	// Throughput groups run Workers goroutines on distinct keys; the
	// headline is ops/s (ns/op is wall time per operation across all
	// workers).
	Throughput
	// Contention groups run Workers goroutines on one key; the headline is
	// acquisitions per second, with the spread between workers.
	Contention
)

// Group is a set of rows measured side by side and compared with the group's
// baseline row.
type Group struct {
	ID    string
	Title string
	Kind  Kind
	Needs Need
	Note  string // one line under the table
	// NoPlot leaves the group out of the plot: its ratios are against an
	// in-process floor and would dwarf the networked ones.
	NoPlot bool
	order  int
}

// Need says which servers a group runs against.
type Need int

const (
	NeedNothing Need = iota
	NeedRedis
	NeedPostgres
)

// Case is one benchmark: a row of a group.
type Case struct {
	Group    string
	Name     string
	Baseline bool
	Order    int // rows sort by Order within their group
	// Run is the benchmark. Cases of the one-goroutine groups give Op
	// instead, and Run then calls it b.N times; benchtable also interleaves
	// the Ops of a group operation by operation (Env.Interleave).
	Run func(b *testing.B, e *Env)
	Op  func(e *Env) (op, error)
}

// ID is the case's path, "group/name", as used by -run filters and
// go test -bench sub-benchmarks.
func (c Case) ID() string { return c.Group + "/" + c.Name }

var (
	groups = map[string]*Group{}
	cases  []Case
)

func addGroup(g Group) {
	g.order = len(groups)
	groups[g.ID] = &g
}

func addCase(c Case) {
	if c.Run == nil && c.Op != nil {
		newOp := c.Op
		c.Run = func(b *testing.B, e *Env) {
			o, err := newOp(e)
			if err != nil {
				e.fatal(b, err)
			}
			runSerial(b, e, o)
		}
	}
	cases = append(cases, c)
}

// Groups returns the groups in the order they were declared.
func Groups() []Group {
	out := make([]Group, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].order < out[j].order })
	return out
}

// GroupByID returns the group with the given ID.
func GroupByID(id string) (Group, bool) {
	g, ok := groups[id]
	if !ok {
		return Group{}, false
	}
	return *g, true
}

// Cases returns every case, grouped in group order, baseline first, then by
// Order.
func Cases() []Case {
	out := append([]Case(nil), cases...)
	sort.SliceStable(out, func(i, j int) bool {
		gi, gj := groups[out[i].Group], groups[out[j].Group]
		if gi.order != gj.order {
			return gi.order < gj.order
		}
		if out[i].Baseline != out[j].Baseline {
			return out[i].Baseline
		}
		return out[i].Order < out[j].Order
	})
	return out
}
