package fencectl

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// flagGroup is a heading of --help and the flags under it.
type flagGroup struct {
	title string
	flags []string
}

// flagGroups are --help's groups of flags, in order: the general ones, the
// commands', then each backend's, the registered ones last.
func flagGroups() []flagGroup {
	groups := []flagGroup{
		{"general", []string{"backend", "json", "timeout"}},
		{"command (release, bump, watch)", []string{"force", "fence", "no-fence", "allow-unwritten", "owner", "by", "interval", "count"}},
		{"Redis (--backend redis)", []string{"redis-url", "redis-cluster", "prefix", "store-prefix"}},
		{"PostgreSQL (--backend postgres, or postgres-sqldb through database/sql)", []string{"postgres-url", "lease-table", "store-table"}},
		{"MySQL/MariaDB (--backend mysql)", []string{"mysql-url", "lease-table", "store-table"}},
	}
	for _, k := range kinds {
		g := flagGroup{title: fmt.Sprintf("%s (--backend %s)", k.Title, k.Name), flags: []string{k.Flag}}
		for _, f := range k.Flags {
			g.flags = append(g.flags, f.Name)
		}
		if k.Prefixes {
			g.flags = append(g.flags, "prefix", "store-prefix")
		}
		groups = append(groups, g)
	}
	return groups
}

// printUsage writes --help: the commands, then the flags of fs by group.
func printUsage(w io.Writer, fs *flag.FlagSet, groups []flagGroup) {
	fmt.Fprint(w, usageText)
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s flags:\n", g.title)
		for _, name := range g.flags {
			f := fs.Lookup(name)
			if f == nil {
				continue
			}
			kind, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if kind != "" {
				line += " " + kind
			}
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" && !strings.Contains(usage, "(default ") {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			}
			fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		}
	}
}

// prefixKinds lists, for the help of --prefix (or, with store, of
// --store-prefix), the backends that flag applies to, each with its
// default.
func prefixKinds(store bool) string {
	var b strings.Builder
	b.WriteString(`Redis (default "fencekit")`)
	for _, k := range kinds {
		if k.Prefixes {
			def := k.DefaultPrefix
			if store && k.DefaultStorePrefix != nil {
				def = *k.DefaultStorePrefix
			}
			fmt.Fprintf(&b, ", %s (default %q)", k.Title, def)
		}
	}
	return b.String()
}

// flagBackends names, for each flag that belongs to some backends only,
// those backends.
func flagBackends() map[string][]string {
	sql := []string{"postgres", "mysql", "postgres-sqldb"}
	m := map[string][]string{
		"redis-cluster": {"redis"},
		"prefix":        {"redis"},
		"store-prefix":  {"redis"},
		"lease-table":   sql,
		"store-table":   sql,
	}
	for _, k := range kinds {
		for _, f := range k.Flags {
			m[f.Name] = append(m[f.Name], k.Name)
		}
		if k.Prefixes {
			m["prefix"] = append(m["prefix"], k.Name)
			m["store-prefix"] = append(m["store-prefix"], k.Name)
		}
	}
	return m
}

// checkBackendFlags refuses a flag of the command line that another
// backend than kind's takes: the operator meant another backend, or the
// flag would be ignored silently (a store prefix that is not read, for
// one).
func checkBackendFlags(c *config, kind string) error {
	owners := flagBackends()
	var names []string
	for name := range c.set {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if who, ok := owners[name]; ok && !contains(who, kind) {
			return usagef("--%s is a flag of %s; the backend here is %s", name, strings.Join(who, ", "), kind)
		}
	}
	return nil
}
