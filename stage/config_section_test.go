package stage

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
)

// stage's tests link none of the packages that register sections: this
// stands for package profiler's, which the files of testdata/config use.
func init() {
	RegisterSection("profiler", SectionFunc(func(d Decoder) (any, error) {
		var m map[string]any
		return m, d.Decode(&m)
	}))
}

// withSection registers s for the test's duration in m (registered.global
// or registered.stage), restoring what was registered before (stage's own
// tests link none of the packages that register sections).
func withSection(t *testing.T, m map[string]Section, name string, s Section) {
	t.Helper()
	registered.Lock()
	old, had := m[name]
	delete(m, name)
	registered.Unlock()
	if m == nil || s == nil {
		t.Fatal("withSection: nil")
	}
	registered.Lock()
	m[name] = s
	registered.Unlock()
	t.Cleanup(func() {
		registered.Lock()
		defer registered.Unlock()
		delete(m, name)
		if had {
			m[name] = old
		}
	})
}

// fakeAIO decodes strictly, as aio.ParseConfig does.
type fakeAIO struct {
	EventLoops int  `yaml:"eventLoops"`
	Reuse      bool `yaml:"reuse"`
}

func TestRegisterSectionDecodes(t *testing.T) {
	calls := 0
	withSection(t, registered.global, "aio", SectionFunc(func(d Decoder) (any, error) {
		calls++
		var c fakeAIO
		if err := d.Decode(&c); err != nil {
			return nil, err
		}
		switch {
		case c.EventLoops < 0:
			// a plain error: reported at the section's line
			return nil, errors.New("eventLoops must not be negative")
		case c.EventLoops > 64:
			return nil, d.Key("eventLoops").Errorf("too many event loops")
		case c.EventLoops == 13:
			// a key the block does not have: located at the block
			return nil, d.Key("reuse").Errorf("unlucky without reuse")
		}
		return c, nil
	}))
	tests := []struct {
		name, doc, want string
		calls           int
		value           any
	}{
		{"valid", "global:\n  aio: {eventLoops: 2}\n", "", 1, fakeAIO{EventLoops: 2}},
		{"absent", "global:\n  shutdown: 1s\n", "", 0, nil},
		{"no global", "stages: {}\n", "", 0, nil},
		{"null section", "global:\n  aio:\n", "", 1, fakeAIO{}},
		{"unknown key", "global:\n  aio:\n    eventLoops: 2\n    bogus: 1\n",
			"conf.yaml: line 4: global.aio.bogus: unknown key (known: eventLoops, reuse)", 1, nil},
		{"bad bool", "global:\n  aio:\n    reuse: maybe\n",
			`conf.yaml: line 3: global.aio.reuse: want a bool value, got "maybe"`, 1, nil},
		{"decimal", "global:\n  aio: {eventLoops: 1.5}\n",
			`conf.yaml: line 2: global.aio.eventLoops: want a whole number, got "1.5"`, 1, nil},
		{"plain error", "global:\n  shutdown: 1s\n  aio:\n    eventLoops: -1\n",
			"conf.yaml: line 4: global.aio: eventLoops must not be negative", 1, nil},
		{"located error", "global:\n  aio:\n    eventLoops: 65\n",
			"conf.yaml: line 3: global.aio.eventLoops: too many event loops", 1, nil},
		{"absent key", "global:\n  aio:\n    eventLoops: 13\n",
			"conf.yaml: line 3: global.aio.reuse: unlucky without reuse", 1, nil},
		// a section nobody registered is an unknown key
		{"unregistered", "global:\n  tracer: {bogus: [1]}\n",
			"conf.yaml: line 2: global.tracer: unknown key (known: aio, batching, memory, predicate, profiler, queue, shutdown, threadManager, threadpool); " +
				"or a section of a package that is not linked in (a forgotten import?)", 0, nil},
		{"typo", "global:\n  aoi: {}\n",
			`conf.yaml: line 2: global.aoi: unknown key (did you mean "aio"? known: aio, batching, memory, predicate, profiler, queue, shutdown, threadManager, threadpool)`, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls = 0
			cfg, err := ParseConfig([]byte(tt.doc), "conf.yaml")
			if calls != tt.calls {
				t.Errorf("section decoded %d times, want %d", calls, tt.calls)
			}
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				v, ok := cfg.Global.Section("aio")
				if ok != (tt.value != nil) || v != tt.value {
					t.Fatalf("Section(aio) = %v, %v; want %v", v, ok, tt.value)
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

// fakeRemote is a stage section as package remote's.
type fakeRemote struct {
	Mode string `yaml:"mode"`
}

func TestRegisterStageSection(t *testing.T) {
	withSection(t, registered.stage, "remote", SectionFunc(func(d Decoder) (any, error) {
		var c fakeRemote
		if err := d.Decode(&c); err != nil {
			return nil, err
		}
		if c.Mode != "" && c.Mode != "request" {
			return nil, d.Key("mode").Errorf("unknown mode %q", c.Mode)
		}
		return c, nil
	}))
	reg := NewRegistry()
	reg.Register("h", func() Handler { return HandlerFunc(func([]any) error { return nil }) })
	doc := "stages:\n  A:\n    handler: h\n    nodes: [w]\n    remote: {mode: request}\n  B:\n    handler: h\n"
	cfg, err := ParseConfig([]byte(doc), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := cfg.Stages[0].Config.Section("remote"); !ok || v != (fakeRemote{Mode: "request"}) {
		t.Fatalf("A: %v %v", v, ok)
	}
	if _, ok := cfg.Stages[1].Config.Section("remote"); ok {
		t.Fatal("B has a remote section")
	}
	// SetSection copies on write
	a := cfg.Stages[0].Config
	a.SetSection("remote", fakeRemote{Mode: "x"})
	if v, _ := cfg.Stages[0].Config.Section("remote"); v != (fakeRemote{Mode: "request"}) {
		t.Fatalf("SetSection changed a copy: %v", v)
	}

	for _, tt := range []struct{ doc, want string }{
		{"stages:\n  A:\n    handler: h\n    remote:\n      mode: durble\n",
			`c.yaml: line 5: stages.A.remote.mode: unknown mode "durble"`},
		{"stages:\n  A:\n    handler: h\n    remote: {bogus: 1}\n",
			`c.yaml: line 4: stages.A.remote.bogus: unknown key (known: mode)`},
		{"stages:\n  A:\n    handler: h\n    remot: {}\n",
			`c.yaml: line 4: stages.A.remot: unknown key (did you mean "remote"?`},
		{"stages:\n  A:\n    handler: h\n    cluster: {}\n",
			`c.yaml: line 4: stages.A.cluster: unknown key (known: `},
	} {
		_, err := ParseConfig([]byte(tt.doc), "c.yaml")
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q: %v\nwant %s", tt.doc, err, tt.want)
		}
	}
}

func TestRegisterSectionPanics(t *testing.T) {
	ok := SectionFunc(func(Decoder) (any, error) { return nil, nil })
	withSection(t, registered.global, "profiler", ok)
	for name, register := range map[string]func(){
		"own key":       func() { RegisterSection("threadpool", ok) },
		"own stage key": func() { RegisterStageSection("handler", ok) },
		"empty":         func() { RegisterSection("", ok) },
		"nil section":   func() { RegisterSection("aio", nil) },
		"twice":         func() { RegisterSection("profiler", ok) },
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

func TestNewDecoder(t *testing.T) {
	d, err := NewDecoder([]byte("eventLoops: 2\nreuse: true\n"), "f.yaml", "global.aio")
	if err != nil {
		t.Fatal(err)
	}
	var c fakeAIO
	if err := d.Decode(&c); err != nil || c != (fakeAIO{2, true}) {
		t.Fatalf("%+v %v", c, err)
	}
	if !d.Present() || d.Key("nope").Present() || d.Path() != "global.aio" || d.File() != "f.yaml" {
		t.Fatal("Present, Key, Path or File")
	}
	if err := d.Key("reuse").Errorf("no"); err == nil || err.Error() != "f.yaml: line 2: global.aio.reuse: no" {
		t.Fatalf("Errorf: %v", err)
	}
	if _, err := NewDecoder([]byte("a: [1"), "f.yaml", "x"); err == nil || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("syntax error: %v", err)
	}
	empty, err := NewDecoder(nil, "", "x")
	if err != nil || empty.Present() || empty.Decode(&c) != nil {
		t.Fatal("empty document")
	}
}
