package profiler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/logbuf"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestLibraryAppConfiguredByYAML: an application that only loads a file
// with stage.Load (the profiler linked in, as any import of it does) gets
// the profile log, the stage graph and the dashboard the file asks for,
// and its logger hears the runtime, without starting the profiler by hand.
func TestLibraryAppConfiguredByYAML(t *testing.T) {
	dir := t.TempDir()
	logFile, graph := filepath.Join(dir, "p.log"), filepath.Join(dir, "g.dot")
	path := filepath.Join(dir, "app.yaml")
	doc := fmt.Sprintf(`global:
  profiler: {enabled: true, interval: 1h, file: %q, graph: %q, http: "127.0.0.1:0"}
  shutdown: 5s
stages:
  Front: {handler: app.Forward}
  Back: {handler: app.Fail}
`, logFile, graph)
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := stage.NewRegistry()
	reg.Register("app.Forward", func() stage.Handler { return &relayTo{to: "Back"} })
	reg.Register("app.Fail", func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error { return errors.New("app: no such order") })
	})
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	m, err := stage.Load(path, reg, stage.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ShutdownBound(); got.String() != "5s" {
		t.Errorf("ShutdownBound() = %v, want the file's 5s", got)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc, ok := m.Service("profiler")
	if !ok {
		t.Fatal("no profiler service on a manager whose file switches it on")
	}
	p := svc.(*profiler.Profiler)
	if p.Addr() == nil {
		t.Fatal("profiler dashboard not listening")
	}
	resp, err := http.Get("http://" + p.Addr().String() + profiler.DashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Sandstorm dashboard") {
		t.Errorf("dashboard: %s, want the dashboard page; body %.200s", resp.Status, body)
	}

	front, _ := m.Stage("Front")
	if err := front.Sink().Enqueue(42); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{"serving dashboard", "app: no such order", "stage=Back"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if fi, err := os.Stat(logFile); err != nil || fi.Size() == 0 {
		t.Errorf("profile log: %v (size %v)", err, fi)
	}
	if dot, err := os.ReadFile(graph); err != nil || !strings.Contains(string(dot), "Back") {
		t.Errorf("stage graph: %v: %s", err, dot)
	}
}

// relayTo passes every event on to another stage.
type relayTo struct {
	to  string
	out sink.Sink
}

func (f *relayTo) Init(c *stage.Context) (err error) {
	f.out, err = c.Sink(f.to)
	return err
}

func (f *relayTo) HandleEvents(batch []sink.Event) error { return f.out.EnqueueMany(batch) }

// TestParseWithoutProfilerSection: no profiler block, no service.
func TestParseWithoutProfilerSection(t *testing.T) {
	reg := stage.NewRegistry()
	reg.Register("app.Nop", func() stage.Handler { return stage.HandlerFunc(func([]sink.Event) error { return nil }) })
	m, err := stage.Parse([]byte("stages:\n  A: {handler: app.Nop}\n"), reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Service("profiler"); ok {
		t.Error("a profiler service without a profiler block")
	}
	if got := m.ShutdownBound(); got != stage.DefaultShutdownBound {
		t.Errorf("ShutdownBound() = %v, want %v", got, stage.DefaultShutdownBound)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
