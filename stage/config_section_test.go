package stage

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
)

// withSection registers validate for the test's duration, restoring what
// was registered before (stage's own tests link neither aio nor profiler).
func withSection(t *testing.T, name string, validate SectionValidator) {
	t.Helper()
	sections.Lock()
	old, had := sections.m[name]
	delete(sections.m, name)
	sections.Unlock()
	RegisterSection(name, validate)
	t.Cleanup(func() {
		sections.Lock()
		defer sections.Unlock()
		delete(sections.m, name)
		if had {
			sections.m[name] = old
		}
	})
}

// fakeAIO decodes strictly, as aio.ParseConfig does.
type fakeAIO struct {
	EventLoops int  `yaml:"eventLoops"`
	Reuse      bool `yaml:"reuse"`
}

func TestRegisterSectionValidates(t *testing.T) {
	calls := 0
	withSection(t, "aio", func(n *yaml.Node, path string) error {
		calls++
		var c fakeAIO
		if err := yamlstrict.Decode(n, path, &c); err != nil {
			return err
		}
		switch {
		case c.EventLoops < 0:
			// a plain error: reported at the section's line
			return errors.New("eventLoops must not be negative")
		case c.EventLoops > 64:
			// the way profiler.DecodeConfig reports: a ConfigError without a file
			return &ConfigError{Err: yamlstrict.Errorf(n, path+".eventLoops", "too many event loops")}
		}
		return nil
	})
	tests := []struct {
		name, doc, want string
		calls           int
	}{
		{"valid", "global:\n  aio: {eventLoops: 2}\n", "", 1},
		{"absent", "global:\n  shutdown: 1s\n", "", 0},
		{"no global", "stages: {}\n", "", 0},
		{"null section", "global:\n  aio:\n", "", 1},
		{"unknown key", "global:\n  aio:\n    eventLoops: 2\n    bogus: 1\n",
			"conf.yaml: line 4: global.aio.bogus: unknown key (known: eventLoops, reuse)", 1},
		{"bad bool", "global:\n  aio:\n    reuse: maybe\n",
			`conf.yaml: line 3: global.aio.reuse: want a bool value, got "maybe"`, 1},
		{"decimal", "global:\n  aio: {eventLoops: 1.5}\n",
			`conf.yaml: line 2: global.aio.eventLoops: want a whole number, got "1.5"`, 1},
		{"plain error", "global:\n  shutdown: 1s\n  aio:\n    eventLoops: -1\n",
			"conf.yaml: line 4: global.aio: eventLoops must not be negative", 1},
		{"config error", "global:\n  aio: {eventLoops: 65}\n",
			"conf.yaml: line 2: global.aio.eventLoops: too many event loops", 1},
		// without a registered validator the section is kept as is
		{"unregistered", "global:\n  profiler: {bogus: [1]}\n", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls = 0
			cfg, err := ParseConfig([]byte(tt.doc), "conf.yaml")
			if calls != tt.calls {
				t.Errorf("validator called %d times, want %d", calls, tt.calls)
			}
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tt.name == "unregistered" && cfg.Global.Profiler.Kind != yaml.MappingNode {
					t.Fatalf("profiler section not kept: %+v", cfg.Global.Profiler)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v\nwant %s", err, tt.want)
			}
			if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, yamlstrict.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig and yamlstrict.ErrInvalid", err)
			}
		})
	}
	// Parse (and so Load) fails before building anything
	if _, err := Parse([]byte("global:\n  aio: {bogus: 1}\n"), NewRegistry()); err == nil ||
		!strings.HasPrefix(err.Error(), "config: line 2: global.aio.bogus: unknown key") {
		t.Fatalf("Parse: %v", err)
	}
}

func TestRegisterSectionPanics(t *testing.T) {
	ok := func(*yaml.Node, string) error { return nil }
	withSection(t, "profiler", ok)
	for name, register := range map[string]func(){
		"unknown section": func() { RegisterSection("threadpool", ok) },
		"nil validator":   func() { RegisterSection("aio", nil) },
		"twice":           func() { RegisterSection("profiler", ok) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			register()
		})
	}
}
