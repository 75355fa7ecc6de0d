package yamlstrict

import (
	"errors"
	"fmt"
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
		{"bad int", "pool:\n  max: many\n", `line 2: pool.max: want a whole number, got "many"`},
		{"decimal int", "pool:\n  max: 2.9\n", `line 2: pool.max: want a whole number, got "2.9"`},
		{"decimal in map value", "tags:\n  a: {max: 1.5}\n", `line 2: tags.a.max: want a whole number, got "1.5"`},
		{"decimal in pointer", "opt:\n  max: 0.5\n", `line 2: opt.max: want a whole number, got "0.5"`},
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

type numbers struct {
	I    int            `yaml:"i"`
	I8   int8           `yaml:"i8"`
	U    uint           `yaml:"u"`
	U16  uint16         `yaml:"u16"`
	P    *int           `yaml:"p"`
	B    bool           `yaml:"b"`
	ByID map[int]string `yaml:"byID"`
}

// Integers are whole and in range: yaml.v3 alone truncates 1.5 to 1 and
// turns -1e30 into math.MinInt64 without a word.
func TestDecodeWholeNumbers(t *testing.T) {
	tests := []struct {
		doc, wantErr string
		want         numbers
	}{
		{doc: "i: 7", want: numbers{I: 7}},
		{doc: "i: 2.0", want: numbers{I: 2}},
		{doc: "i: 1e3", want: numbers{I: 1000}},
		{doc: "i: -0x10", want: numbers{I: -16}},
		{doc: "i8: -128", want: numbers{I8: -128}},
		{doc: "u16: 65535", want: numbers{U16: 65535}},
		{doc: "b: true", want: numbers{B: true}},
		{doc: "byID: {3: x}", want: numbers{ByID: map[int]string{3: "x"}}},
		{doc: "i: 1.5", wantErr: `line 1: i: want a whole number, got "1.5"`},
		{doc: "i: -2.9", wantErr: `line 1: i: want a whole number, got "-2.9"`},
		{doc: "p: 0.1", wantErr: `line 1: p: want a whole number, got "0.1"`},
		{doc: "i: .inf", wantErr: `line 1: i: want a whole number, got ".inf"`},
		{doc: "i: -.inf", wantErr: `line 1: i: want a whole number, got "-.inf"`},
		{doc: "i: .nan", wantErr: `line 1: i: want a whole number, got ".nan"`},
		{doc: "i: '5'", wantErr: `line 1: i: want a whole number, got "5"`},
		{doc: "i: true", wantErr: `line 1: i: want a whole number, got "true"`},
		{doc: "i: -1e30", wantErr: `line 1: i: -1e30 is out of range for int`},
		{doc: "i: 9223372036854775808", wantErr: `line 1: i: 9223372036854775808 is out of range for int`},
		{doc: "i8: 128", wantErr: `line 1: i8: 128 is out of range for int8`},
		{doc: "i8: 200.0", wantErr: `line 1: i8: 200.0 is out of range for int8`},
		{doc: "u: -1", wantErr: `line 1: u: -1 is out of range for uint`},
		{doc: "u: -1.0", wantErr: `line 1: u: -1.0 is out of range for uint`},
		{doc: "u16: 65536", wantErr: `line 1: u16: 65536 is out of range for uint16`},
		{doc: "b: maybe", wantErr: `line 1: b: want a bool value, got "maybe"`},
		{doc: "b: 1", wantErr: `line 1: b: want a bool value, got "1"`},
		{doc: "byID:\n  0.5: x\n", wantErr: `line 2: byID.0.5: want a whole number, got "0.5"`},
	}
	for _, tt := range tests {
		t.Run(tt.doc, func(t *testing.T) {
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(tt.doc), &doc); err != nil {
				t.Fatal(err)
			}
			var v numbers
			err := Decode(&doc, "", &v)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v, want %q (decoded %+v)", err, tt.wantErr, v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.I != tt.want.I || v.I8 != tt.want.I8 || v.U16 != tt.want.U16 || v.B != tt.want.B || len(v.ByID) != len(tt.want.ByID) {
				t.Fatalf("decoded %+v, want %+v", v, tt.want)
			}
		})
	}
}

// size decodes itself, the way aio.ByteSize does.
type size int

func (s *size) UnmarshalYAML(n *yaml.Node) error {
	if n.Value == "lots" {
		return fmt.Errorf("line %d: bad size %q", n.Line, n.Value)
	}
	return n.Decode((*int)(s))
}

// An Unmarshaler's error is located at its key, not at the enclosing block.
func TestDecodeUnmarshalerErrorAtKey(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("a: 1\nsizes:\n  x: 3\n  y: lots\n"), &doc); err != nil {
		t.Fatal(err)
	}
	var v struct {
		A     int             `yaml:"a"`
		Sizes map[string]size `yaml:"sizes"`
	}
	err := Decode(&doc, "top", &v)
	if want := `line 4: top.sizes.y: bad size "lots"`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
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

func TestSuggest(t *testing.T) {
	known := []string{"threshold", "max", "min", "controller", "PageCache", "Checksum"}
	for word, want := range map[string]string{
		"treshold":   "threshold",
		"maxx":       "max",
		"mx":         "max",
		"pagecache":  "PageCache",
		"Checksun":   "Checksum",
		"contrloler": "controller",
		"zzz":        "",
		"weight":     "",
	} {
		if got := Suggest(word, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", word, got, want)
		}
	}
}

func TestSyntaxErrorLines(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		line int
		msg  string
	}{
		{"a:\n  b: {c: 1\n  d: 2\n", 2, "'{' not closed"},
		{"a: [1, 2\n", 2, "'[' not closed"}, // on line 1 yaml.v3 gives where it gave up
		{"a:\n  b:\n    c: [x\n    d: 1\n", 3, "'[' not closed"},
		{"a: \"open\n", 2, "found unexpected end of stream"}, // a scanner error: yaml.v3's line is kept
	} {
		var n yaml.Node
		err := yaml.Unmarshal([]byte(tc.doc), &n)
		if err == nil {
			t.Fatalf("%q parsed", tc.doc)
		}
		var ye *Error
		if !errors.As(SyntaxError(err), &ye) || ye.Line != tc.line || !strings.Contains(ye.Msg, tc.msg) {
			t.Errorf("%q: %v (yaml.v3: %v), want line %d %q", tc.doc, SyntaxError(err), err, tc.line, tc.msg)
		}
	}
}

func TestDecodeReportsEveryError(t *testing.T) {
	var n yaml.Node
	doc := "min: x\nmaxx: 2\nlist: [1, y, 3]\nsub: {a: 1, b: 2}\n"
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Min  int   `yaml:"min"`
		Max  int   `yaml:"max"`
		List []int `yaml:"list"`
		Sub  struct {
			A int `yaml:"a"`
		} `yaml:"sub"`
	}
	err := Decode(&n, "cfg", &v)
	var lines []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		lines = append(lines, e.Error())
	}
	want := []string{
		`line 1: cfg.min: want a whole number, got "x"`,
		`line 2: cfg.maxx: unknown key (did you mean "max"? known: list, max, min, sub)`,
		`line 3: cfg.list[1]: want a whole number, got "y"`,
		`line 4: cfg.sub.b: unknown key (known: a)`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// FuzzDistance: the edit distance is symmetric, zero only for equal words
// and bounded by the longer word,
// and Suggest only suggests what it was given.
func FuzzDistance(f *testing.F) {
	f.Add("treshold", "threshold")
	f.Add("", "max")
	f.Add("ab", "ba")
	f.Fuzz(func(t *testing.T, a, b string) {
		d := distance(a, b)
		same := string([]rune(a)) == string([]rune(b)) // invalid UTF-8 reads as U+FFFD
		if d != distance(b, a) || d < 0 || d > max(len([]rune(a)), len([]rune(b))) || same != (d == 0) {
			t.Fatalf("distance(%q, %q) = %d", a, b, d)
		}
		if s := Suggest(a, []string{b}); s != "" && s != b {
			t.Fatalf("Suggest(%q, [%q]) = %q", a, b, s)
		}
	})
}
