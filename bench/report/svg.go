package report

import (
	"fmt"
	"math"
	"strings"
)

// SVG draws two panels with nothing but text output: the time of every row
// relative to its group's baseline (Latency and Throughput groups), and the
// acquisitions per second of the Contention groups. targets add a red tick
// at their limit on the bar they concern.
func SVG(groups []GroupSummary, targets []Target) string {
	const (
		width   = 980
		labelX  = 12  // left edge of labels
		plotX0  = 380 // x of 0 on the bar axis
		plotX1  = 860 // right end of the bar axis
		barH    = 14
		rowH    = 20
		headH   = 22
		titleH  = 28
		padding = 16
	)
	type bar struct {
		group, label  string
		value, lo, hi float64
		limit         float64 // 0: no target
		fencekit      bool
		baseline      bool
		text          string
		header        bool
	}
	limits := map[string]float64{}
	for _, t := range targets {
		if t.Metric != "allocs" {
			limits[t.Group+"\x00"+t.Row] = t.Limit
		}
	}
	var ratioBars, contBars []bar
	ratioMax, contMax := 1.5, 0.0
	for _, g := range groups {
		if _, ok := g.Baseline(); !ok || len(g.Rows) < 2 || g.NoPlot {
			continue
		}
		if g.Kind == Contention {
			contBars = append(contBars, bar{header: true, label: g.Title})
			for _, r := range g.Rows {
				acq := statOrNaN(r.Extra, MetricAcqPerSec)
				st := r.Extra[MetricAcqPerSec]
				if math.IsNaN(acq) {
					continue
				}
				contMax = math.Max(contMax, math.Max(acq, st.Max))
				text := FormatRate(acq) + "/s"
				if cv := statOrNaN(r.Extra, MetricWorkerCV); !math.IsNaN(cv) {
					text += fmt.Sprintf(" · CV %.0f%%", cv)
				}
				contBars = append(contBars, bar{label: r.Name, value: acq, lo: st.Min, hi: st.Max,
					fencekit: isFencekit(r.Name), baseline: r.Baseline, text: text})
			}
			continue
		}
		ratioBars = append(ratioBars, bar{header: true, label: g.Title})
		for _, r := range g.Rows {
			if r.Baseline || math.IsNaN(r.Ratio.Median) {
				continue
			}
			ratioMax = math.Max(ratioMax, math.Max(r.Ratio.Median, r.Ratio.Max))
			ratioBars = append(ratioBars, bar{group: g.ID, label: r.Name, value: r.Ratio.Median,
				lo: r.Ratio.Min, hi: r.Ratio.Max, limit: limits[g.ID+"\x00"+r.Name],
				fencekit: isFencekit(r.Name), text: FormatRatio(r.Ratio.Median)})
		}
	}
	// To the next 0.5, and at most MaxRatio: a bar beyond is cut (its
	// label still gives the value), so that ratios near 1 stay readable.
	ratioMax = math.Min(math.Ceil(ratioMax*1.05*2)/2, MaxRatio)
	if contMax <= 0 {
		contMax = 1
	}
	contMax = niceCeil(contMax * 1.05)

	height := padding
	panelHeight := func(bars []bar) int {
		h := titleH
		for _, b := range bars {
			if b.header {
				h += headH
			} else {
				h += rowH
			}
		}
		return h + 28 // axis labels
	}
	if len(ratioBars) > 0 {
		height += panelHeight(ratioBars) + padding
	}
	if len(contBars) > 0 {
		height += panelHeight(contBars) + padding
	}

	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&s, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)

	y := padding
	drawPanel := func(title string, bars []bar, xmax float64, ticks []float64, tickLabel func(float64) string, refLine float64) {
		xOf := func(v float64) float64 { return plotX0 + (plotX1-plotX0)*math.Max(0, math.Min(v, xmax))/xmax }
		fmt.Fprintf(&s, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", labelX, y+16, esc(title))
		y += titleH
		top, bottom := y, y
		for _, b := range bars {
			if b.header {
				bottom += headH
			} else {
				bottom += rowH
			}
		}
		// Grid first, so that headers (on white) and bars cover it.
		for _, t := range ticks {
			x := xOf(t)
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>`+"\n", x, top, x, bottom)
			fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%s</text>`+"\n", x, bottom+16, esc(tickLabel(t)))
		}
		if refLine > 0 {
			x := xOf(refLine)
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333" stroke-dasharray="4 3"/>`+"\n", x, top, x, bottom)
		}
		fmt.Fprintf(&s, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", plotX0, bottom, plotX1, bottom)
		for _, b := range bars {
			if b.header {
				fmt.Fprintf(&s, `<rect x="%d" y="%d" width="%d" height="%d" fill="white"/>`+"\n", labelX-2, y+1, width-labelX, headH-2)
				fmt.Fprintf(&s, `<text x="%d" y="%d" font-weight="bold" fill="#333">%s</text>`+"\n", labelX, y+15, esc(b.label))
				y += headH
				continue
			}
			fill := "#9e9e9e"
			if b.fencekit {
				fill = "#1f6fb4"
			}
			if b.baseline {
				fill = "#555555"
			}
			fmt.Fprintf(&s, `<text x="%d" y="%d">%s</text>`+"\n", labelX+14, y+barH-2, esc(b.label))
			w := xOf(b.value) - plotX0
			fmt.Fprintf(&s, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", plotX0, y, w, barH, fill)
			clipped := b.value > xmax
			if clipped {
				// Off the scale: a white notch says the bar is cut.
				fmt.Fprintf(&s, `<path d="M%.1f %d l-6 %d l6 %d z" fill="white"/>`+"\n", xOf(xmax), y, barH/2, barH/2)
			}
			if !math.IsNaN(b.lo) && !math.IsNaN(b.hi) && b.hi > b.lo && !clipped {
				cy := float64(y) + barH/2.0
				fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="1"/>`+"\n", xOf(b.lo), cy, xOf(b.hi), cy)
				for _, v := range []float64{b.lo, b.hi} {
					fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="1"/>`+"\n", xOf(v), cy-4, xOf(v), cy+4)
				}
			}
			if b.limit > 0 {
				fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-width="2.5"/>`+"\n", xOf(b.limit), y-2, xOf(b.limit), y+barH+2)
			}
			tx := xOf(b.value) + 6
			if !math.IsNaN(b.hi) && !clipped {
				tx = math.Max(tx, xOf(b.hi)+6)
			}
			fmt.Fprintf(&s, `<text x="%.1f" y="%d">%s</text>`+"\n", tx, y+barH-2, esc(b.text))
			y += rowH
		}
		y = bottom + 28 + padding
	}
	if len(ratioBars) > 0 {
		step := 0.5
		if ratioMax > 5 {
			step = 1
		}
		var ticks []float64
		for t := 0.0; t <= ratioMax+1e-9; t += step {
			ticks = append(ticks, t)
		}
		drawPanel("Cost vs each group's baseline (median of same-round ratios; whiskers: min–max; red: target; lower is better)",
			ratioBars, ratioMax, ticks, func(t float64) string { return fmt.Sprintf("%g×", t) }, 1)
	}
	if len(contBars) > 0 {
		var ticks []float64
		for i := 0; i <= 4; i++ {
			ticks = append(ticks, contMax*float64(i)/4)
		}
		drawPanel("Contention: acquisitions per second on one key (whiskers: min–max over rounds; higher is better)",
			contBars, contMax, ticks, func(t float64) string { return FormatRate(t) }, 0)
	}
	s.WriteString("</svg>\n")
	return s.String()
}

// MaxRatio is the end of the ratio axis.
const MaxRatio = 3.0

func isFencekit(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "fencekit") || strings.Contains(n, "guard") || strings.Contains(n, "updatefenced") ||
		strings.HasPrefix(n, "store.") || strings.HasPrefix(n, "backend") || strings.HasPrefix(n, "client")
}

// niceCeil rounds x up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}
