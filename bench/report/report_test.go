package report

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	cases := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{math.NaN(), 2, 4}, 3},
	}
	for _, c := range cases {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
	st := NewStat([]float64{10, 30, 20})
	if st.Min != 10 || st.Max != 30 || st.Median != 20 || st.Spread() != 0.5 {
		t.Errorf("NewStat = %+v, spread %v", st, st.Spread())
	}
}

// The ratio is the median of same-round ratios, not the ratio of medians:
// a slow round slows both rows and cancels out.
func TestSummarizePairsRounds(t *testing.T) {
	g := Group{ID: "g", Kind: Latency, Rows: []Row{
		{Name: "base", Baseline: true, Samples: []Sample{{Round: 1, NsPerOp: 100}, {Round: 2, NsPerOp: 200}, {Round: 3, NsPerOp: 1000}}},
		{Name: "x", Samples: []Sample{{Round: 1, NsPerOp: 110}, {Round: 2, NsPerOp: 220}, {Round: 3, NsPerOp: 1100}, {Round: 4, NsPerOp: 1}}},
	}}
	s := Summarize(g)
	x, ok := s.Row("x")
	if !ok {
		t.Fatal("row x missing")
	}
	if math.Abs(x.Ratio.Median-1.1) > 1e-9 || math.Abs(x.Ratio.Min-1.1) > 1e-9 || math.Abs(x.Ratio.Max-1.1) > 1e-9 {
		t.Errorf("ratio = %+v, want 1.1 in every round (round 4 has no baseline)", x.Ratio)
	}
	if x.Rounds != 4 {
		t.Errorf("rounds = %d, want 4", x.Rounds)
	}
	b, _ := s.Baseline()
	if b.Ratio.Median != 1 {
		t.Errorf("baseline ratio = %v, want 1", b.Ratio.Median)
	}
}

func TestSummarizeContentionUsesAcquisitions(t *testing.T) {
	g := Group{ID: "c", Kind: Contention, Rows: []Row{
		{Name: "base", Baseline: true, Samples: []Sample{{Round: 1, NsPerOp: 10, Extra: map[string]float64{MetricAcqPerSec: 1000}}}},
		{Name: "x", Samples: []Sample{{Round: 1, NsPerOp: 99, Extra: map[string]float64{MetricAcqPerSec: 1500, MetricWorkerCV: 40}}}},
	}}
	s := Summarize(g)
	x, _ := s.Row("x")
	if x.Ratio.Median != 1.5 {
		t.Errorf("contention ratio = %v, want 1.5 (acq/s, higher is better)", x.Ratio.Median)
	}
	table := GroupTable(s)
	for _, want := range []string{"1,500", "1.50×", "40%", "**base** (baseline)"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestEvaluate(t *testing.T) {
	g := Summarize(Group{ID: "g", Rows: []Row{
		{Name: "base", Baseline: true, Samples: []Sample{{Round: 1, NsPerOp: 100, AllocsPerOp: 10}}},
		{Name: "x", Samples: []Sample{{Round: 1, NsPerOp: 104, AllocsPerOp: 12}}},
	}})
	res := Evaluate([]Target{
		{Name: "time", Group: "g", Row: "x", Limit: 1.05},
		{Name: "allocs", Group: "g", Row: "x", Metric: "allocs", Limit: 1},
		{Name: "absent", Group: "nope", Row: "x", Limit: 1},
	}, []GroupSummary{g})
	if !res[0].Met || math.Abs(res[0].Value-1.04) > 1e-9 {
		t.Errorf("time target: %+v", res[0])
	}
	if res[1].Met || math.Abs(res[1].Value-1.2) > 1e-9 {
		t.Errorf("allocs target: %+v", res[1])
	}
	if res[2].Met || !math.IsNaN(res[2].Value) {
		t.Errorf("absent target: %+v", res[2])
	}
	table := TargetTable(res)
	for _, want := range []string{"| time | 1.04× | – | met |", "| allocs | 1.20× | – | missed |", "| absent | – | – | not measured |"} {
		if !strings.Contains(table, want) {
			t.Errorf("target table lacks %q:\n%s", want, table)
		}
	}
}

func TestFormat(t *testing.T) {
	cases := map[float64]string{44.03: "44.0 ns", 791.7: "792 ns", 97051: "97.1 µs", 1.2e6: "1.20 ms", 3.5e9: "3.50 s"}
	for in, want := range cases {
		if got := FormatNs(in); got != want {
			t.Errorf("FormatNs(%v) = %q, want %q", in, got, want)
		}
	}
	if got := FormatRate(1234567.4); got != "1,234,567" {
		t.Errorf("FormatRate = %q", got)
	}
	if got := FormatRate(999); got != "999" {
		t.Errorf("FormatRate = %q", got)
	}
	if got := num(33.0001); got != "33" {
		t.Errorf("num = %q", got)
	}
	if got := FormatRatio(math.NaN()); got != "–" {
		t.Errorf("FormatRatio(NaN) = %q", got)
	}
}

func TestSplice(t *testing.T) {
	fresh := Splice("", "table 1")
	if !strings.HasPrefix(fresh, "# Benchmarks") || !strings.Contains(fresh, BeginMarker+"\ntable 1\n"+EndMarker) {
		t.Errorf("fresh document:\n%s", fresh)
	}
	doc := "intro\n" + BeginMarker + "\nold\n" + EndMarker + "\nanalysis\n"
	got := Splice(doc, "new\n")
	want := "intro\n" + BeginMarker + "\nnew\n" + EndMarker + "\nanalysis\n"
	if got != want {
		t.Errorf("Splice =\n%q\nwant\n%q", got, want)
	}
	if again := Splice(got, "new\n"); again != got {
		t.Errorf("Splice is not idempotent")
	}
}

func TestRTTableGroupsByStore(t *testing.T) {
	out := RTTable([]RTRow{
		{Store: "Redis", Op: "acquire (free)", Lib: "fencekit", RoundTrips: 1, Commands: 1, ServerUsec: 6.25},
		{Store: "PostgreSQL", Op: "write", Lib: "fencekit Store.Put", RoundTrips: 1, Commands: 1, ServerUsec: math.NaN()},
		{Store: "Redis", Op: "release", Lib: "go-redsync", Err: "boom"},
	})
	if !strings.Contains(out, "| Redis operation | library | round trips | commands | server execution time |") ||
		!strings.Contains(out, "| acquire (free) | fencekit | 1 | 1 | 6.25 µs |") ||
		!strings.Contains(out, "| PostgreSQL operation | library | round trips | statements |") ||
		!strings.Contains(out, "error: boom") {
		t.Errorf("RTTable:\n%s", out)
	}
	if strings.Index(out, "Redis operation") > strings.Index(out, "PostgreSQL operation") {
		t.Errorf("stores out of first-seen order:\n%s", out)
	}
}

func sampleGroups() []GroupSummary {
	lat := Summarize(Group{ID: "redis-cycle-1", Title: "Redis <cycle> & co", Kind: Latency, Rows: []Row{
		{Name: "bsm/redislock", Baseline: true, Samples: []Sample{{Round: 1, NsPerOp: 100}, {Round: 2, NsPerOp: 120}}},
		{Name: "fencekit Client", Samples: []Sample{{Round: 1, NsPerOp: 103}, {Round: 2, NsPerOp: 123.6}}},
		{Name: "way off", Samples: []Sample{{Round: 1, NsPerOp: 1000}, {Round: 2, NsPerOp: 1200}}},
	}})
	cont := Summarize(Group{ID: "redis-contend-32", Title: "contention", Kind: Contention, Rows: []Row{
		{Name: "bsm/redislock", Baseline: true, Samples: []Sample{{Round: 1, Extra: map[string]float64{MetricAcqPerSec: 1700, MetricWorkerCV: 60}}}},
		{Name: "fencekit Client", Samples: []Sample{{Round: 1, Extra: map[string]float64{MetricAcqPerSec: 1800, MetricWorkerCV: 30}}}},
	}})
	hidden := Summarize(Group{ID: "memory", Title: "in-process", NoPlot: true, Rows: []Row{
		{Name: "map", Baseline: true, Samples: []Sample{{Round: 1, NsPerOp: 40}}},
		{Name: "Store.Put", Samples: []Sample{{Round: 1, NsPerOp: 80}}},
	}})
	return []GroupSummary{lat, cont, hidden}
}

// The plot must be well-formed XML, escape its labels, draw every plotted
// row and leave NoPlot groups out.
func TestSVGWellFormed(t *testing.T) {
	svg := SVG(sampleGroups(), []Target{{Group: "redis-cycle-1", Row: "fencekit Client", Limit: 1.05}})
	dec := xml.NewDecoder(strings.NewReader(svg))
	var texts []string
	elements := 0
	inText := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			elements++
			if elements == 1 && v.Name.Local != "svg" {
				t.Fatalf("root element %q, want svg", v.Name.Local)
			}
			inText = v.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(v))
			}
		case xml.EndElement:
			inText = false
		}
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"Redis <cycle> & co", "fencekit Client", "1.03×", "1,800/s · CV 30%", "way off"} {
		if !strings.Contains(all, want) {
			t.Errorf("plot text lacks %q; has:\n%s", want, all)
		}
	}
	if strings.Contains(all, "in-process") {
		t.Errorf("a NoPlot group was drawn")
	}
	if !strings.Contains(svg, `stroke="#d62728"`) {
		t.Errorf("the target tick is missing")
	}
	if !strings.Contains(all, "10.00×") {
		t.Errorf("a bar beyond the axis must still be labelled with its value:\n%s", all)
	}
}

func TestMarkdownSections(t *testing.T) {
	gs := sampleGroups()
	md := Markdown(Doc{
		Command:  "cd bench && go run ./cmd/benchtable",
		Machine:  []KV{{"CPU", "test"}},
		Targets:  Evaluate([]Target{{Name: "t1", Group: "redis-cycle-1", Row: "fencekit Client", Limit: 1.05}}, gs),
		Groups:   gs,
		RT:       []RTRow{{Store: "Redis", Op: "release", Lib: "fencekit", RoundTrips: 1, Commands: 1}},
		Mem:      []MemRow{{Lib: "fencekit", KeysPerLock: 2, UsagePerLock: 240, Delta: 498.4, IdleKeys: 1, IdleUsage: 88, IdleDelta: 331}},
		PlotPath: "benchmarks.svg",
	})
	for _, want := range []string{"```sh\ncd bench && go run ./cmd/benchtable\n```", "| CPU | test |", "### Targets", "| t1 |",
		"![", "(benchmarks.svg)", "#### Redis <cycle> & co", "### Round trips per operation", "### Redis memory per lock", "| fencekit | 2 | 240 B | 498 B |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestGroupTableServerCPUAndRange(t *testing.T) {
	g := Summarize(Group{ID: "g", Title: "T", Kind: Latency, Rows: []Row{
		{Name: "base", Baseline: true, Samples: []Sample{
			{Round: 1, NsPerOp: 100, Extra: map[string]float64{MetricServerCPU: 3}},
			{Round: 2, NsPerOp: 100, Extra: map[string]float64{MetricServerCPU: 3}}}},
		{Name: "x", Samples: []Sample{
			{Round: 1, NsPerOp: 110, Extra: map[string]float64{MetricServerCPU: 8.2}},
			{Round: 2, NsPerOp: 130, Extra: map[string]float64{MetricServerCPU: 8.4}}}},
	}})
	table := GroupTable(g)
	for _, want := range []string{"server CPU per op", "| x | 120 ns | 1.20× | 1.10–1.30 | 8.30 µs |", "| **base** (baseline) | 100 ns | 1.00× | – | 3.00 µs |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	plain := GroupTable(Summarize(Group{ID: "p", Kind: Latency, Rows: []Row{{Name: "b", Baseline: true, Samples: []Sample{{Round: 1, NsPerOp: 1}}}}}))
	if strings.Contains(plain, "server CPU") {
		t.Errorf("server CPU column without the metric:\n%s", plain)
	}
}

// A latency group with per-operation percentiles compares medians, not
// means: one stalled round's mean does not move the ratio.
func TestLatencyRatioUsesMedianLatency(t *testing.T) {
	g := Summarize(Group{ID: "g", Kind: Latency, Rows: []Row{
		{Name: "base", Baseline: true, Samples: []Sample{{Round: 1, NsPerOp: 100, Extra: map[string]float64{MetricP50: 90, MetricP90: 120}}}},
		{Name: "x", Samples: []Sample{{Round: 1, NsPerOp: 500, Extra: map[string]float64{MetricP50: 99, MetricP90: 150}}}},
	}})
	x, _ := g.Row("x")
	if math.Abs(x.Ratio.Median-1.1) > 1e-9 {
		t.Errorf("ratio = %v, want 1.1 (p50 99 / 90)", x.Ratio.Median)
	}
	table := GroupTable(g)
	for _, want := range []string{"median latency", "| x | 99.0 ns | 1.10× | 1.10–1.10 | 150 ns | 500 ns |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}
