package chaos

import (
	"fmt"
	"slices"

	"github.com/fencekit/fencekit/lock/driver"
)

// exclusion sweeps the spans during which permits were certainly live and
// counts the starts that break the shape: for a semaphore, a permit live
// with Permits others already live; for a read-write lock, a writer live
// with anyone, or a reader live with a writer. max is the most permits
// certainly live at once on one name. Spans are closed, and an end counts
// before a start at the same instant, so that only a true overlap counts.
func exclusion(spans []liveSpan, shape Shape, permits int) (n, most int, first string) {
	byName := map[string][]liveSpan{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	type event struct {
		at    int64
		start bool
		s     liveSpan
	}
	for _, ss := range byName {
		events := make([]event, 0, 2*len(ss))
		for _, s := range ss {
			events = append(events, event{s.Start, true, s}, event{s.End, false, s})
		}
		slices.SortFunc(events, func(a, b event) int {
			if c := cmp64(a.at, b.at); c != 0 {
				return c
			}
			switch {
			case a.start == b.start:
				return 0
			case !a.start:
				return -1
			}
			return 1
		})
		live := map[driver.Kind][]liveSpan{}
		for _, e := range events {
			k := e.s.Kind
			if !e.start {
				live[k] = slices.DeleteFunc(live[k], func(s liveSpan) bool { return s == e.s })
				continue
			}
			var bad []liveSpan
			switch shape {
			case ShapeSemaphore:
				if len(live[k]) >= permits {
					bad = live[k]
				}
			default:
				bad = live[driver.Write]
				if k == driver.Write {
					bad = append(slices.Clone(bad), live[driver.Read]...)
				}
			}
			if len(bad) > 0 {
				if n == 0 {
					first = fmt.Sprintf("%s live from %d while %d other permit(s) were, e.g. %s", e.s, e.at, len(bad), bad[0])
				}
				n++
			}
			live[k] = append(live[k], e.s)
			most = max(most, len(live[driver.Semaphore])+len(live[driver.Read])+len(live[driver.Write]))
		}
	}
	return n, most, first
}

// String renders the span as the report prints it.
func (s liveSpan) String() string {
	return fmt.Sprintf("w%d %v permit (token %d) certainly live over [%d, %d]", s.Worker, s.Kind, s.Token, s.Start, s.End)
}

// readsAboveWriter counts the reads made while their read permit was
// certainly live that saw a fence above the permit's ReadFence. While a
// read permit is live no write permit is granted, and every write permit
// granted before it has a token at most PriorWriter, below the ReadFence
// the reader raised the key to; so the fence a live reader sees is at most
// its ReadFence. A read whose permit had lapsed may see a newer writer's
// fence: that is what the ReadFence lets a reader detect (lapsed).
func readsAboveWriter(reads []readObs) (n, lapsed int, first string) {
	for _, o := range reads {
		if o.Fence <= o.ReadFence {
			continue
		}
		if !o.Live {
			lapsed++
			continue
		}
		if n == 0 {
			first = fmt.Sprintf("w%d read key %d under a live read permit (token %d, read fence %d) and saw fence %d [%d, %d]",
				o.Worker, o.Key, o.Token, o.ReadFence, o.Fence, o.Call, o.Return)
		}
		n++
	}
	return n, lapsed, first
}

// permitTokens checks the tokens of one name's grants: each token belongs
// to one owner (shared counts the grants that break this), and a grant's
// token is above every token another owner was granted before the grant's
// window began (regressions; a retried attempt gets its own token back).
func permitTokens(grants []grant) (shared, regressions int, first string) {
	owner := map[int64]string{}
	var ops []Op
	seen := map[string]bool{}
	for _, g := range grants {
		if o, ok := owner[g.Token]; ok && o != g.Owner {
			if shared == 0 {
				first = fmt.Sprintf("token %d granted to owners %.8s and %.8s", g.Token, o, g.Owner)
			}
			shared++
		}
		owner[g.Token] = g.Owner
		id := fmt.Sprint(g.Owner, "/", g.Token)
		if !seen[id] {
			seen[id] = true
			ops = append(ops, Op{Kind: Acquire, Token: g.Token, Owner: g.Owner, Call: g.Call, Return: g.Return})
		}
	}
	regressions, ex := tokenRegressions(ops)
	if first == "" {
		first = ex
	}
	return shared, regressions, first
}

// priorsForgotten counts grants whose PriorWriter is not below their own
// token, or is below the token of a write permit granted (and returned) to
// another owner before the grant's window began: the newest writer before
// a permit must be at least every writer known to precede it. (An owner's
// retried acquire gets its own permit back, with the same PriorWriter.)
func priorsForgotten(grants []grant) (n int, first string) {
	writes := slices.DeleteFunc(slices.Clone(grants), func(g grant) bool { return g.Kind != driver.Write })
	slices.SortFunc(writes, func(a, b grant) int { return cmp64(a.Return, b.Return) })
	byCall := slices.Clone(grants)
	slices.SortFunc(byCall, func(a, b grant) int { return cmp64(a.Call, b.Call) })
	// The two newest writers of distinct owners returned so far: the
	// newest of another owner than g's is one of them.
	var top, second grant
	j := 0
	for _, g := range byCall {
		for j < len(writes) && writes[j].Return < g.Call {
			w := writes[j]
			switch {
			case w.Owner == top.Owner:
				top.Token = max(top.Token, w.Token)
			case w.Token > top.Token:
				top, second = w, top
			case w.Token > second.Token:
				second = w
			}
			j++
		}
		newest := top.Token
		if top.Owner == g.Owner {
			newest = second.Token
		}
		if g.Prior >= g.Token || g.Prior < newest {
			if n == 0 {
				first = fmt.Sprintf("%v permit token %d has prior writer %d; newest writer granted before it: %d", g.Kind, g.Token, g.Prior, newest)
			}
			n++
		}
	}
	return n, first
}
