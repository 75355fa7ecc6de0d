package stage_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

var update = flag.Bool("update", false, "rewrite golden files")

type echoArgs struct {
	Greeting string            `yaml:"greeting"`
	Next     string            `yaml:"next"`
	Routes   map[string]string `yaml:"routes"`
}

type echoHandler struct {
	args echoArgs
	out  chan string
}

func (h *echoHandler) Init(c *stage.Context) error { return c.DecodeArgs(&h.args) }
func (h *echoHandler) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		if h.out != nil {
			h.out <- h.args.Greeting + " " + e.(string)
		}
	}
	return nil
}

func testRegistry(out chan string) *stage.Registry {
	r := stage.NewRegistry()
	r.Register("test.Echo", func() stage.Handler { return &echoHandler{out: out} })
	r.Register("test.Count", func() stage.Handler { return &lifecycle{} })
	r.StageArgs("test.Echo", "next", "routes.*")
	r.DeclareArgs("test.Echo", func() any { return &echoArgs{} })
	return r
}

// TestConfigGolden loads every testdata/config/*.yaml: valid_* must load and
// start, bad_* must fail with the error recorded in the golden file.
func TestConfigGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/config/*.yaml")
	sort.Strings(files)
	var got []string
	for _, f := range files {
		base := filepath.Base(f)
		m, err := stage.Load(f, testRegistry(nil))
		if err == nil && !strings.HasPrefix(base, "valid") {
			// args are decoded by the handler's Init, at Start
			err = m.Start(context.Background())
			_ = m.Shutdown(context.Background())
		}
		if strings.HasPrefix(base, "valid") {
			if err != nil {
				t.Errorf("%s: %v", base, err)
				continue
			}
			if err := m.Start(context.Background()); err != nil {
				t.Errorf("%s: start: %v", base, err)
			}
			_ = m.Shutdown(context.Background())
			continue
		}
		if err == nil {
			t.Errorf("%s: loaded, want an error", base)
			continue
		}
		if !errors.Is(err, stage.ErrInvalidConfig) {
			t.Errorf("%s: error %v does not wrap ErrInvalidConfig", base, err)
		}
		got = append(got, base+": "+err.Error())
	}
	golden := "testdata/config_errors.golden"
	text := strings.Join(got, "\n") + "\n"
	if *update {
		if err := os.WriteFile(golden, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if text != string(want) {
		t.Errorf("errors differ from %s (run with -update to accept):\n--- got\n%s--- want\n%s", golden, text, want)
	}
}

func TestConfigDefaultsAndOverrides(t *testing.T) {
	cfg, err := stage.LoadConfig("testdata/config/valid_full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Stages) != 4 || cfg.Stages[0].Name != "Echo" || cfg.Stages[1].Name != "Sink" {
		t.Fatalf("stages %+v", cfg.Stages)
	}
	echo, snk := cfg.Stages[0].Config, cfg.Stages[1].Config
	// per-stage values override global, the rest is inherited
	if echo.ThreadPool.Max != 4 || echo.ThreadPool.Min != 1 || !echo.ThreadPool.Controller.Enabled ||
		echo.ThreadPool.Controller.Idle != 5*time.Second || echo.Batching.Max != 64 || echo.Queue.Threshold != 1000 {
		t.Fatalf("Echo config %+v", echo)
	}
	if snk.ThreadPool.Max != 20 || snk.Batching.Max != 1000 || snk.Queue.Threshold != -1 {
		t.Fatalf("Sink config %+v", snk)
	}
	if cfg.Global.Shutdown != 5*time.Second {
		t.Fatalf("global %+v", cfg.Global)
	}
}

func TestConfigArgsReachHandler(t *testing.T) {
	out := make(chan string, 1)
	m, err := stage.Load("testdata/config/valid_full.yaml", testRegistry(out))
	if err != nil {
		t.Fatal(err)
	}
	started(t, m)
	echo, ok := m.Stage("Echo")
	if !ok {
		t.Fatal("no Echo stage")
	}
	if err := echo.Sink().Enqueue("world"); err != nil {
		t.Fatal(err)
	}
	if got := <-out; got != "hello world" {
		t.Fatalf("got %q", got)
	}
}

// A group block without a rate shares the group whether the block giving
// the rate comes before or after it in the file.
func TestConfigGroupRateEitherOrder(t *testing.T) {
	withRate := "    predicate: {type: group, group: api, rate: 1000, depth: 10}\n"
	without := "    predicate: {type: group, group: api}\n"
	for name, preds := range map[string][2]string{
		"rate first": {withRate, without},
		"rate later": {without, withRate},
	} {
		t.Run(name, func(t *testing.T) {
			doc := "stages:\n  A:\n    handler: test.Count\n" + preds[0] +
				"  B:\n    handler: test.Count\n" + preds[1]
			m, err := stage.Parse([]byte(doc), testRegistry(nil))
			if err != nil {
				t.Fatal(err)
			}
			a, _ := m.Stage("A")
			b, _ := m.Stage("B")
			ga, ok := a.Sink().Predicate().(*enqueuepred.GroupRate)
			if !ok || ga.Group() != "api" || b.Sink().Predicate() != sink.Predicate(ga) {
				t.Fatalf("A has %v, B has %v: want one shared group rate", a.Sink().Predicate(), b.Sink().Predicate())
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/config/*.yaml")
	for _, file := range files {
		data, _ := os.ReadFile(file)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := stage.ParseConfig(data, "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, stage.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "fuzz.yaml: ") {
				t.Fatalf("error %q is not a located config error", err)
			}
			return
		}
		for _, s := range cfg.Stages {
			if s.Config.Handler == "" || s.Config.ThreadPool.Max < 0 || s.Config.ThreadPool.Min < 0 {
				t.Fatalf("invalid stage accepted: %+v", s)
			}
		}
	})
}

// A file with mistakes in its global block and in five stages reports
// every one of them at once, in file order, each with file, line and key:
// unknown handler, unknown keys, bad values, args that do not decode into
// the handler's declared args, and every predicate block that does not
// build.
func TestConfigAllErrorsAtOnce(t *testing.T) {
	const file = "testdata/config/bad_five_stages.yaml"
	_, err := stage.Load(file, testRegistry(nil))
	var ce *stage.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Load: %v, want a *stage.ConfigError", err)
	}
	want := []struct {
		line int
		key  string
	}{
		{2, "global.threadpool.max"},
		{3, "global.shutdown"},
		{6, "stages.Front.handler"},
		{7, "stages.Front.queue.treshold"},
		{10, "stages.Price.threadpool.mx"},
		{11, "stages.Price.batching.max"},
		{12, "stages.Price.args.volume"},
		{15, "stages.Ship.predicate.type"},
		{18, "stages.Audit.predicate.rate"},
		{19, "stages.Audit.ordering.key"},
		{22, "stages.Bill.supervisor.strategy"},
		{23, "stages.Bill.predicate.limit"},
	}
	errs := ce.Errors()
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		prefix := fmt.Sprintf("line %d: %s: ", w.line, w.key)
		if !strings.HasPrefix(errs[i].Error(), prefix) {
			t.Errorf("error %d is %q, want %q...", i, errs[i], prefix)
		}
	}
	if !errors.Is(err, stage.ErrUnknownHandler) || !errors.Is(err, stage.ErrInvalidConfig) {
		t.Errorf("%v does not wrap ErrUnknownHandler and ErrInvalidConfig", err)
	}
	// ParseConfig alone, without a registry, reports what it can check.
	_, err = stage.ParseConfig(mustRead(t, file), file)
	if !errors.As(err, &ce) || len(ce.Errors()) != 7 {
		t.Fatalf("ParseConfig: %v, want the 7 errors without handlers, args and predicates", err)
	}
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
