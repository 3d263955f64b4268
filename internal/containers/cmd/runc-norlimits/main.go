// Command runc-norlimits is an OCI runtime for podman in sandboxes that
// refuse setrlimit: it deletes process.rlimits from the bundle's
// config.json and then runs runc with the same arguments. .ci/containers
// builds it and names it as podman's runtime in containers.conf.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	if bundle, ok := bundleDir(os.Args[1:]); ok {
		if err := stripRlimits(filepath.Join(bundle, "config.json")); err != nil {
			fmt.Fprintln(os.Stderr, "runc-norlimits:", err)
			os.Exit(1)
		}
	}
	runc, err := findRunc()
	if err != nil {
		fmt.Fprintln(os.Stderr, "runc-norlimits:", err)
		os.Exit(1)
	}
	err = syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "runc-norlimits: exec runc:", err)
	os.Exit(1)
}

// findRunc looks on PATH, then where Debian and others install runc: podman
// may call the runtime with a PATH without the sbin directories.
func findRunc() (string, error) {
	if p, err := exec.LookPath("runc"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("runc not found on PATH or in the sbin directories")
}

// bundleDir finds the --bundle (or -b) argument of `runc create` and `runc
// run`; other commands have none.
func bundleDir(args []string) (string, bool) {
	for i, a := range args {
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			return args[i+1], true
		case strings.HasPrefix(a, "--bundle="):
			return strings.TrimPrefix(a, "--bundle="), true
		}
	}
	return "", false
}

// stripRlimits rewrites config.json without process.rlimits, keeping every
// other field as it was.
func stripRlimits(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var proc map[string]json.RawMessage
	if raw, ok := cfg["process"]; !ok || json.Unmarshal(raw, &proc) != nil {
		return nil
	}
	if _, ok := proc["rlimits"]; !ok {
		return nil
	}
	delete(proc, "rlimits")
	if cfg["process"], err = json.Marshal(proc); err != nil {
		return err
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}
