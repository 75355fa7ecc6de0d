package profiler_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

func block(t testing.TB, doc, file string) stage.Decoder {
	t.Helper()
	d, err := stage.NewDecoder([]byte(doc), file, "global.profiler")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDecodeConfig(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want profiler.Config
		err  string // substring of the error; "" for none
	}{
		{name: "absent", doc: "", want: profiler.Config{}},
		{name: "full",
			doc:  "enabled: true\ninterval: 250ms\nfile: p.log\ngraph: g.dot\nhttp: 127.0.0.1:9090\n",
			want: profiler.Config{Enabled: true, Interval: 250 * time.Millisecond, File: "p.log", Graph: "g.dot", HTTP: "127.0.0.1:9090"}},
		{name: "flow", doc: `{enabled: false, http: ":0"}`, want: profiler.Config{HTTP: ":0"}},
		{name: "unknown key", doc: "enabled: true\nintervall: 1s\n", err: `line 2: global.profiler.intervall: unknown key`},
		{name: "bad duration", doc: "interval: soon\n", err: `line 1: global.profiler.interval: bad duration "soon"`},
		{name: "negative interval", doc: "enabled: true\ninterval: -1s\n", err: `line 2: global.profiler.interval: negative duration -1s`},
		{name: "bad address", doc: "http: 9090\n", err: `line 1: global.profiler.http: bad listen address "9090"`},
		{name: "wrong type", doc: "enabled: [yes]\n", err: `line 1: global.profiler.enabled: want a bool value`},
		{name: "not a mapping", doc: "on\n", err: `line 1: global.profiler: want a mapping`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := profiler.DecodeConfig(block(t, tt.doc, "conf.yaml"))
			if tt.err == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got != tt.want {
					t.Fatalf("got %+v, want %+v", got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, got %+v", got)
			}
			if !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), "conf.yaml: ") {
				t.Fatalf("error %q, want it to start with the file and contain %q", err, tt.err)
			}
			if !errors.Is(err, stage.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap stage.ErrInvalidConfig", err)
			}
		})
	}
}

func TestConfigFromManager(t *testing.T) {
	reg := stage.NewRegistry()
	reg.Register("test.Nop", func() stage.Handler { return stage.HandlerFunc(func([]any) error { return nil }) })
	doc := `global:
  profiler:
    enabled: true
    interval: 2s
    graph: out.dot
stages:
  A: {handler: test.Nop}
`
	m, err := stage.Parse([]byte(doc), reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := profiler.ConfigFrom(m)
	if err != nil {
		t.Fatal(err)
	}
	want := profiler.Config{Enabled: true, Interval: 2 * time.Second, Graph: "out.dot"}
	if cfg != want {
		t.Fatalf("got %+v, want %+v", cfg, want)
	}
	p, err := profiler.New(m, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Config(); got.File != profiler.DefaultFile || got.Interval != 2*time.Second || got.Graph != "out.dot" {
		t.Fatalf("defaults not applied: %+v", got)
	}

	bad := strings.Replace(doc, "graph: out.dot", "graph: out.dot\n    port: 9", 1)
	// a bad block fails ParseConfig itself: profiler registers
	// global.profiler with stage
	_, err = stage.ParseConfig([]byte(bad), "sandstorm.yaml")
	if err == nil || err.Error() != "sandstorm.yaml: line 6: global.profiler.port: unknown key (known: enabled, file, graph, http, interval)" {
		t.Fatalf("got error %v", err)
	}

	// A manager built in Go has no configuration: the zero Config.
	if cfg, err := profiler.ConfigFrom(stage.NewManager(stage.Options{})); err != nil || cfg != (profiler.Config{}) {
		t.Fatalf("got %+v, %v", cfg, err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	for _, cfg := range []profiler.Config{{Interval: -time.Second}, {HTTP: "nonsense"}} {
		if _, err := profiler.New(m, cfg, nil); !errors.Is(err, stage.ErrInvalidConfig) {
			t.Errorf("New(%+v): got %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{"", "enabled: true", "interval: 1s\nhttp: ':0'", "file: [1]", "{a: b}", "interval: -3m", "http: '[::1]:80'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		d, err := stage.NewDecoder([]byte(doc), "f.yaml", "global.profiler")
		if err != nil {
			return
		}
		cfg, err := profiler.DecodeConfig(d)
		if err != nil {
			if !errors.Is(err, stage.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "f.yaml: ") {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		if cfg.Interval < 0 {
			t.Fatalf("accepted negative interval %v", cfg.Interval)
		}
		if _, err := profiler.New(stage.NewManager(stage.Options{}), cfg, nil); err != nil {
			t.Fatalf("decoded config %+v refused by New: %v", cfg, err)
		}
	})
}
