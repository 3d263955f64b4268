package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"
)

// TestWaitSVG: the plot drawn from docs/contention-wait.csv is well-formed
// SVG with one polyline per row in the longest-wait panel, one per row with
// a p99 in the p99 panel, and a hollow marker for each cut longest wait.
func TestWaitSVG(t *testing.T) {
	f, err := os.Open("../../docs/contention-wait.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	series, err := ReadWaitCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 17 {
		t.Fatalf("%d rows in docs/contention-wait.csv; want 17", len(series))
	}
	wantP99, wantCut := 0, 0
	for _, s := range series {
		if len(s.Points) != 3 || s.Points[0].W != 2 || s.Points[2].W != 32 {
			t.Fatalf("%s: points %+v; want W = 2, 8, 32", s.Row, s.Points)
		}
		if !math.IsNaN(s.Points[0].P99) {
			wantP99++
		}
		for _, p := range s.Points {
			if p.MaxCut {
				wantCut++
			}
		}
	}

	svg := WaitSVG(series)
	rows := map[string]map[string]bool{"max": {}, "p99": {}}
	hollow := 0
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed SVG: %v", err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range el.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch el.Name.Local {
		case "polyline":
			if rows[attr["class"]][attr["data-row"]] {
				t.Errorf("two %s polylines for %q", attr["class"], attr["data-row"])
			}
			rows[attr["class"]][attr["data-row"]] = true
			if n := len(strings.Fields(attr["points"])); n != 3 {
				t.Errorf("%s polyline of %q has %d points; want 3", attr["class"], attr["data-row"], n)
			}
		case "circle":
			if attr["fill"] == "white" {
				hollow++
			}
		}
	}
	if len(rows["max"]) != len(series) || len(rows["p99"]) != wantP99 {
		t.Errorf("polylines: %d longest-wait, %d p99; want %d and %d", len(rows["max"]), len(rows["p99"]), len(series), wantP99)
	}
	if wantP99 != 14 || hollow != wantCut {
		t.Errorf("%d rows with p99 (want 14), %d hollow markers (want %d)", wantP99, hollow, wantCut)
	}
	for _, s := range series {
		if !rows["max"][s.Row] {
			t.Errorf("no polyline for %q", s.Row)
		}
	}
}

// TestWaitCSVRoundTrip: WriteWaitCSV writes what ReadWaitCSV reads back,
// an unmeasured p99 included; a wrong header is refused.
func TestWaitCSVRoundTrip(t *testing.T) {
	in := []WaitSeries{{Row: `a, "b"`, Points: []WaitPoint{{W: 2, P99: 1.5, Max: 2}, {W: 8, P99: math.NaN(), Max: 3000, MaxCut: true}}}}
	var buf bytes.Buffer
	if err := WriteWaitCSV(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadWaitCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].Row != in[0].Row || len(out[0].Points) != 2 ||
		out[0].Points[0] != in[0].Points[0] || !math.IsNaN(out[0].Points[1].P99) || !out[0].Points[1].MaxCut {
		t.Fatalf("read back %+v; want %+v", out, in)
	}
	if _, err := ReadWaitCSV(strings.NewReader("row,W\n")); err == nil {
		t.Fatal("a wrong header was accepted")
	}
}
