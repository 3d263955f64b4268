package report

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// WaitPoint is one contention run of a row: W workers, its p99 and longest
// wait in milliseconds (NaN where not measured), and whether the longest
// wait is a lower bound because the run's end cut it short (≥ in the
// table).
type WaitPoint struct {
	W        int
	P99, Max float64
	MaxCut   bool
}

// WaitSeries is one row of the contention table across W.
type WaitSeries struct {
	Row    string
	Points []WaitPoint
}

// waitCSVHeader is the header of the CSV that ReadWaitCSV reads and
// WriteWaitCSV writes.
var waitCSVHeader = []string{"row", "W", "wait_p99_ms", "wait_max_ms", "max_cut"}

// ReadWaitCSV reads contention figures, one run per line, with the header
// row,W,wait_p99_ms,wait_max_ms,max_cut (an empty p99 when not measured,
// max_cut true when the longest wait is a lower bound). Series keep the
// order in which rows first appear; points are sorted by W.
func ReadWaitCSV(r io.Reader) ([]WaitSeries, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 || strings.Join(recs[0], ",") != strings.Join(waitCSVHeader, ",") {
		return nil, fmt.Errorf("wait CSV: the header must be %s", strings.Join(waitCSVHeader, ","))
	}
	var out []WaitSeries
	at := map[string]int{}
	for i, rec := range recs[1:] {
		bad := func(what string) error { return fmt.Errorf("wait CSV line %d: bad %s", i+2, what) }
		w, err := strconv.Atoi(rec[1])
		if err != nil || w < 1 {
			return nil, bad("W")
		}
		p := WaitPoint{W: w, P99: math.NaN()}
		if rec[2] != "" {
			if p.P99, err = strconv.ParseFloat(rec[2], 64); err != nil || p.P99 <= 0 {
				return nil, bad("wait_p99_ms")
			}
		}
		if p.Max, err = strconv.ParseFloat(rec[3], 64); err != nil || p.Max <= 0 {
			return nil, bad("wait_max_ms")
		}
		if p.MaxCut, err = strconv.ParseBool(rec[4]); err != nil {
			return nil, bad("max_cut")
		}
		j, ok := at[rec[0]]
		if !ok {
			j = len(out)
			at[rec[0]] = j
			out = append(out, WaitSeries{Row: rec[0]})
		}
		out[j].Points = append(out[j].Points, p)
	}
	for _, s := range out {
		sort.Slice(s.Points, func(a, b int) bool { return s.Points[a].W < s.Points[b].W })
	}
	if len(out) == 0 {
		return nil, errors.New("wait CSV: no rows")
	}
	return out, nil
}

// WriteWaitCSV writes series in the form ReadWaitCSV reads.
func WriteWaitCSV(w io.Writer, series []WaitSeries) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(waitCSVHeader)
	for _, s := range series {
		for _, p := range s.Points {
			p99 := ""
			if !math.IsNaN(p.P99) {
				p99 = strconv.FormatFloat(p.P99, 'f', 2, 64)
			}
			_ = cw.Write([]string{s.Row, strconv.Itoa(p.W), p99, strconv.FormatFloat(p.Max, 'f', 2, 64), strconv.FormatBool(p.MaxCut)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// waitStyle is how one series is drawn: a colour per backend, solid for
// fencekit queued, dashed for fencekit polling, dotted for a peer, black
// for the FIFO floor.
func waitStyle(row string) (color, dash string, width float64) {
	n := strings.ToLower(row)
	color = "#7f7f7f"
	switch {
	case strings.Contains(n, "floor"):
		return "#000000", "", 2.5
	case strings.Contains(n, "memory"):
		color = "#1f6fb4"
	case strings.Contains(n, "redis"), strings.Contains(n, "redsync"):
		color = "#d62728"
	case strings.Contains(n, "postgres"), strings.Contains(n, "pg_advisory"):
		color = "#2ca02c"
	case strings.Contains(n, "mariadb"), strings.Contains(n, "get_lock"):
		color = "#ff7f0e"
	case strings.Contains(n, "etcd"):
		color = "#9467bd"
	}
	switch {
	case strings.Contains(n, "exponential"):
		return color, "8 3 2 3", 1.5 // a second peer on the same backend
	case strings.Contains(n, "redsync"):
		return color, "1 3", 1.5 // a third
	case !strings.Contains(n, "fencekit"):
		return color, "2 3", 1.5
	case strings.Contains(n, "polling"):
		return color, "7 4", 1.5
	}
	return color, "", 2.5
}

// WaitSVG plots wait time against W, one polyline per series in each of
// two panels (longest wait; p99 wait, where measured), log-scale in both
// axes, with a legend. A hollow marker is a longest wait that the run's end
// cut short (a lower bound).
func WaitSVG(series []WaitSeries) string {
	const (
		width, height   = 1120, 470
		panelW, panelH  = 300, 340
		top, left, gap  = 56, 62, 70
		legendX         = left + 2*panelW + gap + 24
		yLo, yHi        = 0.1, 10000.0 // ms
		legendRow       = 17
		legendLineWidth = 28
	)
	ws := map[int]bool{}
	for _, s := range series {
		for _, p := range s.Points {
			ws[p.W] = true
		}
	}
	var wlist []int
	for w := range ws {
		wlist = append(wlist, w)
	}
	sort.Ints(wlist)
	wLo, wHi := 1.0, 2.0
	if len(wlist) > 0 {
		wLo, wHi = float64(wlist[0]), float64(wlist[len(wlist)-1])
	}
	if wHi <= wLo {
		wHi = wLo * 2
	}

	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&s, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&s, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", left-50,
		esc("Contention: wait for the lock against W workers on one key (log scales; lower is better)"))

	panel := func(x0 int, title, class string, value func(WaitPoint) float64) {
		xOf := func(w float64) float64 {
			return float64(x0) + 16 + (panelW-32)*(math.Log2(w)-math.Log2(wLo))/(math.Log2(wHi)-math.Log2(wLo))
		}
		yOf := func(v float64) float64 {
			v = math.Max(yLo, math.Min(v, yHi))
			return top + panelH*(1-(math.Log10(v)-math.Log10(yLo))/(math.Log10(yHi)-math.Log10(yLo)))
		}
		fmt.Fprintf(&s, `<text x="%d" y="%d" font-weight="bold" fill="#333">%s</text>`+"\n", x0, top-10, esc(title))
		for v := yLo; v <= yHi*1.0001; v *= 10 {
			y := yOf(v)
			fmt.Fprintf(&s, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>`+"\n", x0, y, x0+panelW, y)
			fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end" fill="#333">%s</text>`+"\n", x0-6, y+4, esc(FormatMs(v)))
		}
		for _, w := range wlist {
			x := xOf(float64(w))
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>`+"\n", x, top, x, top+panelH)
			fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">W = %d</text>`+"\n", x, top+panelH+18, w)
		}
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", x0, top, panelW, panelH)
		for _, sr := range series {
			var pts []string
			var marks []string
			for _, p := range sr.Points {
				v := value(p)
				if math.IsNaN(v) {
					continue
				}
				x, y := xOf(float64(p.W)), yOf(v)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				fill := "%s"
				if class == "max" && p.MaxCut {
					fill = "white"
				}
				marks = append(marks, fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="3" stroke="%%s" fill="%s"/>`, x, y, fill))
			}
			if len(pts) == 0 {
				continue
			}
			color, dash, width := waitStyle(sr.Row)
			dashAttr := ""
			if dash != "" {
				dashAttr = fmt.Sprintf(` stroke-dasharray="%s"`, dash)
			}
			fmt.Fprintf(&s, `<polyline class="%s" data-row="%s" points="%s" fill="none" stroke="%s" stroke-width="%.1f"%s/>`+"\n",
				class, esc(sr.Row), strings.Join(pts, " "), color, width, dashAttr)
			for _, m := range marks {
				s.WriteString(strings.ReplaceAll(m, "%s", color) + "\n")
			}
		}
	}
	panel(left, "longest wait (hollow: at least, cut by the run's end)", "max", func(p WaitPoint) float64 { return p.Max })
	panel(left+panelW+gap, "p99 wait (where recorded)", "p99", func(p WaitPoint) float64 { return p.P99 })

	y := top
	for _, sr := range series {
		color, dash, width := waitStyle(sr.Row)
		dashAttr := ""
		if dash != "" {
			dashAttr = fmt.Sprintf(` stroke-dasharray="%s"`, dash)
		}
		fmt.Fprintf(&s, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%.1f"%s/>`+"\n",
			legendX, y-4, legendX+legendLineWidth, y-4, color, width, dashAttr)
		fmt.Fprintf(&s, `<text x="%d" y="%d" font-size="11">%s</text>`+"\n", legendX+legendLineWidth+6, y, esc(sr.Row))
		y += legendRow
	}
	fmt.Fprintf(&s, `<text x="%d" y="%d" font-size="11" fill="#333">%s</text>`+"\n", left, height-14,
		esc("solid: fencekit queued; dashed: fencekit polling; dotted: other locks; black: in-process FIFO mutex (the floor)"))
	s.WriteString("</svg>\n")
	return s.String()
}

// FormatMs writes a time in milliseconds for an axis: 0.1 ms, 10 ms, 1 s.
func FormatMs(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'g', 3, 64) + " s"
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + " ms"
}
