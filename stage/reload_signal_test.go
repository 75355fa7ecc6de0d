package stage_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/logbuf"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestReloadOnSignal: SIGHUP reloads the file; a bad file is refused with
// each of its errors logged at ERROR.
func TestReloadOnSignal(t *testing.T) {
	// The test's own subscription keeps a SIGHUP sent before
	// ReloadOnSignal subscribes from killing the test binary.
	mine := make(chan os.Signal, 16)
	signal.Notify(mine, syscall.SIGHUP)
	defer signal.Stop(mine)

	path := filepath.Join(t.TempDir(), "graph.yaml")
	if err := os.WriteFile(path, []byte(reloadA), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := stage.Load(path, reloadRegistry(newReloadLedger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		stage.ReloadOnSignal(ctx, m, path, log)
	}()
	defer func() { cancel(); <-done }()

	hupUntil := func(what string, cond func() bool) {
		t.Helper()
		waitFor(t, what, func() bool {
			if cond() {
				return true
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
			return false
		})
	}
	writeAtomic(t, path, reloadB)
	hupUntil("the reload to add Tap", func() bool { _, ok := m.Stage("Tap"); return ok })
	waitFor(t, "the summary to be logged", func() bool {
		return strings.Contains(logs.String(), `msg="configuration reloaded"`) && strings.Contains(logs.String(), "added Tap, Fork")
	})

	bad := "stages:\n  Front:\n    handler: test.Nope\n  Other:\n    handler: test.Relay\n    threadpool: {max: -1}\n"
	writeAtomic(t, path, bad)
	hupUntil("the refusal to be logged", func() bool { return strings.Count(logs.String(), "level=ERROR") >= 2 })
	errLines := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			errLines++
			if !strings.Contains(line, "reload refused: the running configuration stays") || !strings.Contains(line, path+": line ") {
				t.Errorf("error line %q", line)
			}
		}
	}
	// Both errors of the refused file are logged, each on its own line.
	// (Not a count: the test's repeated SIGHUPs may have a further
	// refusal half logged by now.)
	for _, want := range []string{`unknown handler \"test.Nope\"`, "negative thread count -1"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no error line with %q among %d:\n%s", want, errLines, logs.String())
		}
	}
	if _, ok := m.Stage("Tap"); !ok {
		t.Error("the refused reload changed the graph")
	}
}

// writeAtomic replaces the file at path with data by a rename, so that a
// reload never reads it half written.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
