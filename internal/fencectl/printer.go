package fencectl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// printer writes text or JSON, and keeps the first write error.
type printer struct {
	out  io.Writer
	json bool
	err  error
}

// print writes v as JSON, or the text format with args (the value itself
// is not used for text).
func (p *printer) print(v any, format string, args ...any) error {
	if p.json {
		enc := json.NewEncoder(p.out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil && p.err == nil {
			p.err = err
		}
		return p.err
	}
	p.printf(format, args...)
	return p.err
}

func (p *printer) printf(format string, args ...any) {
	if _, err := fmt.Fprintf(p.out, format, args...); err != nil && p.err == nil {
		p.err = err
	}
}

// table writes rows under header, aligned.
func (p *printer) table(header []string, rows [][]string) error {
	w := tabwriter.NewWriter(p.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	if err := w.Flush(); err != nil && p.err == nil {
		p.err = err
	}
	return p.err
}
