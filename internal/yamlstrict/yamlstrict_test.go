package yamlstrict

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type inner struct {
	Max      int           `yaml:"max"`
	Interval time.Duration `yaml:"interval"`
}

type outer struct {
	Name  string           `yaml:"name"`
	Pool  inner            `yaml:"pool"`
	Tags  map[string]inner `yaml:"tags"`
	List  []inner          `yaml:"list"`
	Free  map[string]any   `yaml:"free"`
	Plain int
	Raw   yaml.Node `yaml:"raw"`
	Opt   *inner    `yaml:"opt"`
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name, doc string
		wantErr   string
	}{
		{"ok", "name: x\npool: {max: 3, interval: 2s}\ntags: {a: {max: 1}}\nlist: [{max: 2}]\nfree: {anything: [1]}\nplain: 4\nraw: {whatever: 1}\nopt: {max: 9}\n", ""},
		{"unknown top", "name: x\nmaxx: 1\n", "line 2: maxx: unknown key"},
		{"unknown nested", "pool:\n  max: 1\n  min: 2\n", "line 3: pool.min: unknown key"},
		{"unknown in map value", "tags:\n  a:\n    bogus: 1\n", "line 3: tags.a.bogus: unknown key"},
		{"unknown in list", "list:\n  - max: 1\n  - nope: 2\n", "line 3: list[1].nope: unknown key"},
		{"bad duration", "pool:\n  interval: 5 parsecs\n", `line 2: pool.interval: bad duration "5 parsecs"`},
		{"wrong kind", "pool: 3\n", "line 1: pool: want a mapping"},
		{"bad int", "pool:\n  max: many\n", `line 2: pool.max: want a int value, got "many"`},
		{"list for scalar", "name: [1]\n", "line 1: name: want a string value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(tt.doc), &doc); err != nil {
				t.Fatal(err)
			}
			var v outer
			err := Decode(&doc, "", &v)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if v.Pool.Max != 3 || v.Pool.Interval != 2*time.Second || v.Tags["a"].Max != 1 || v.Opt.Max != 9 || v.Plain != 4 {
					t.Fatalf("decoded %+v", v)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeKeepsDefaultsAndSkips(t *testing.T) {
	var doc yaml.Node
	_ = yaml.Unmarshal([]byte("type: rate\nmax: 7\n"), &doc)
	v := inner{Max: 1, Interval: time.Second}
	if err := Decode(&doc, "p", &v, "type"); err != nil {
		t.Fatal(err)
	}
	if v.Max != 7 || v.Interval != time.Second {
		t.Fatalf("got %+v", v)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("name: x\npool: {max: 3, interval: 2s}\n")
	f.Add("tags: {a: {max: [1]}}\n")
	f.Add("list: [1, {max: 2}]\n")
	f.Fuzz(func(t *testing.T, s string) {
		var doc yaml.Node
		if yaml.Unmarshal([]byte(s), &doc) != nil {
			return
		}
		var v outer
		_ = Decode(&doc, "", &v)
	})
}
