package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/configs"
)

// TestBinaryInitErrorsLocatedAndLoggedOnce: a check made in a handler's
// Init (HttpRecv's maxConnections, CacheMiss's root, a route to no stage)
// names the file, line and key, and the command logs it once.
func TestBinaryInitErrorsLocatedAndLoggedOnce(t *testing.T) {
	bin := buildHaboob(t)
	lineOf := func(text, needle string) int {
		i := strings.Index(text, needle)
		if i < 0 {
			t.Fatalf("configs/haboob.yaml has no %q", needle)
		}
		return strings.Count(text[:i], "\n") + 1
	}
	base := string(configs.Haboob)
	for _, tc := range []struct {
		name, old, new, key string
		root                bool // pass -root (CacheMiss's check is about the file's root)
	}{
		{"negative maxConnections", "maxConnections: 20000", "maxConnections: -1", "stages.HttpRecv.args.maxConnections: must not be negative, got -1", true},
		{"missing root", `root: ""`, `root: "/does/not/exist"`, "stages.CacheMiss.args.root: haboob: document root", false},
		{"route to no stage", "/checksum/: Checksum", "/checksum/: Checksun", `stages.HttpRecv.args.routes./checksum/: no stage "Checksun" (did you mean "Checksum"?)`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(base, tc.old) {
				t.Fatalf("configs/haboob.yaml has no %q", tc.old)
			}
			text := strings.Replace(base, tc.old, tc.new, 1)
			path := filepath.Join(t.TempDir(), "haboob.yaml")
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"-config", path, "-addr", "127.0.0.1:0", "-profiler", ""}
			if tc.root {
				args = append(args, "-root", t.TempDir())
			}
			raw, err := exec.Command(bin, args...).CombinedOutput()
			if err == nil {
				t.Fatalf("exit 0\n%s", raw)
			}
			out := strings.ReplaceAll(string(raw), `\"`, `"`) // slog quotes the error
			want := path + ": line " + strconv.Itoa(lineOf(text, tc.new)) + ": " + tc.key
			if n := strings.Count(out, want); n != 1 {
				t.Fatalf("%q appears %d times in\n%s", want, n, out)
			}
			if n := strings.Count(out, "level=ERROR"); n != 1 {
				t.Errorf("%d ERROR lines, want 1:\n%s", n, out)
			}
		})
	}
}
