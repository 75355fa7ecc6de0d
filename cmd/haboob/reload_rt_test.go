package main

import (
	"os"
	"strings"
	"testing"
)

// TestBinaryReloadRetargetsChecksum: a SIGHUP reload that replaces the
// Checksum stage's rt predicate (a new target, admission left at its
// default, on) hands the new predicate to the running Checksum: its page
// and /stats report the new target, and its Degrader, which degrades
// before it admits, has switched the new predicate's admission control
// off as it did the old one's.
func TestBinaryReloadRetargetsChecksum(t *testing.T) {
	r, w, config := startReloadable(t, "")
	base := "http://" + r.addr

	checks := []struct {
		path, want string
	}{
		{"/checksum/x", "target 200ms, admission control false"},
		{"/stats", "dynamic.Checksum.target 200ms"},
	}
	for _, c := range checks {
		if code, body := get(t, base+c.path); code != 200 || !strings.Contains(body, c.want) {
			t.Fatalf("GET %s before the reload: %d, no %q:\n%s", c.path, code, c.want, body)
		}
	}

	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	const old = "predicate: {type: rt, target: 200ms, enabled: false}"
	if !strings.Contains(string(data), old) {
		t.Fatalf("configs/haboob.yaml changed: no %q to edit", old)
	}
	replaceFile(t, config, strings.Replace(string(data), old, "predicate: {type: rt, target: 50ms}", 1))
	hangup(t, r)
	if line := w.waitFor(t, `msg="configuration reloaded"`); !strings.Contains(line, "changed Checksum (predicate)") {
		t.Fatalf("reload summary: %s", line)
	}
	checks[0].want = "target 50ms, admission control false"
	checks[1].want = "dynamic.Checksum.target 50ms"
	for _, c := range checks {
		if code, body := get(t, base+c.path); code != 200 || !strings.Contains(body, c.want) {
			t.Errorf("GET %s after the reload: %d, no %q:\n%s", c.path, code, c.want, body)
		}
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}
