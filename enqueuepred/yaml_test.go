package enqueuepred

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/sink"
)

func parse(t testing.TB, doc string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	return &n
}

func TestFromYAML(t *testing.T) {
	tests := []struct {
		doc   string
		check func(t *testing.T, p sink.Predicate)
	}{
		{"{type: threshold, limit: 1000}", func(t *testing.T, p sink.Predicate) {
			if p.(*threshold).Limit() != 1000 {
				t.Fatal("limit")
			}
		}},
		{"{type: rate, rate: 5000, depth: 100}", func(t *testing.T, p sink.Predicate) {
			r := p.(*Rate)
			if r.Rate() != 5000 || r.bucketDepth() != 100 {
				t.Fatal("rate/depth")
			}
		}},
		{"{type: rt, target: 500ms}", func(t *testing.T, p sink.Predicate) {
			r := p.(*ResponseTime)
			if r.Target() != 500*time.Millisecond || r.Mode() != "fast" || !r.Enabled() {
				t.Fatal("rt defaults")
			}
		}},
		{"{type: rt, target: 1s, mode: thesis, nreq: 50, alpha: 0.5, rateMax: 100, enabled: false}", func(t *testing.T, p sink.Predicate) {
			r := p.(*ResponseTime)
			if r.Mode() != "thesis" || r.p.nreq != 50 || r.p.alpha != 0.5 || r.p.rateMax != 100 || r.Enabled() {
				t.Fatalf("rt knobs %+v", r.p)
			}
		}},
		{"{type: multiclass, targets: {0: 2s, 1: 500ms}}", func(t *testing.T, p sink.Predicate) {
			m := p.(*multiclass)
			if len(m.Classes()) != 2 || m.p[1].target != 0.5 {
				t.Fatal("multiclass")
			}
		}},
		// threads is optional: on a stage, saturated follows the pool.
		{"{type: saturated, of: {type: threshold, limit: 0}}", func(t *testing.T, p sink.Predicate) {
			if p.(*saturated).threads != 0 {
				t.Fatal("threads set")
			}
		}},
		{"{type: saturated, threads: 4, of: {type: threshold, limit: 0}}", func(t *testing.T, p sink.Predicate) {
			if p.(*saturated).threads != 4 {
				t.Fatal("threads")
			}
		}},
		{"{type: counter, limit: 64}", func(t *testing.T, p sink.Predicate) {
			if p.(*counter).Limit() != 64 {
				t.Fatal("counter")
			}
		}},
		{"{type: cost, limit: 50, target: 200ms, max: 500}", func(t *testing.T, p sink.Predicate) {
			if c := p.(*costLimit); c.Limit() != 50 || c.fb == nil || c.fb.cfg.Max != 500 || c.fb.cfg.Target != 200*time.Millisecond {
				t.Fatal("adaptive cost")
			}
		}},
		{"{type: account, of: {type: counter, limit: 3}}", func(t *testing.T, p sink.Predicate) {
			if a := p.(*accounting); a.inner.(*counter).Limit() != 3 || a.max != 100 {
				t.Fatal("account")
			}
		}},
		{"{type: codel, shed: true}", func(t *testing.T, p sink.Predicate) {
			if !p.(*sojourn).cfg.Shed {
				t.Fatal("codel shed")
			}
		}},
		{"{type: vegas, initial: 8, max: 100}", func(t *testing.T, p sink.Predicate) {
			if l := p.(*Limit); l.Limit() != 8 || l.cfg.Max != 100 || l.Name() != "vegas" {
				t.Fatal("vegas")
			}
		}},
		{"{type: gradient, tolerance: 2, window: 50ms}", func(t *testing.T, p sink.Predicate) {
			if l := p.(*Limit); l.Limit() != 20 || l.cfg.Tolerance != 2 || l.cfg.Window != 50*time.Millisecond || l.Name() != "gradient" {
				t.Fatal("gradient")
			}
		}},
		{"{type: red, min: 10, max: 40, maxp: 0.2}", func(t *testing.T, p sink.Predicate) {
			if c := p.(*red).Config(); c.Min != 10 || c.Max != 40 || c.MaxP != 0.2 {
				t.Fatal("red")
			}
		}},
		{"{type: codel, target: 10ms, interval: 200ms}", func(t *testing.T, p sink.Predicate) {
			if c := p.(*sojourn).cfg; c.Target != 10*time.Millisecond || c.Interval != 200*time.Millisecond {
				t.Fatal("codel")
			}
		}},
		{"{type: all, of: [{type: threshold, limit: 10}, {type: rate, rate: 100}]}", func(t *testing.T, p sink.Predicate) {
			if len(p.(*allOf).Children()) != 2 {
				t.Fatal("all")
			}
		}},
		{"{type: any, of: [{type: counter, limit: 1}]}", func(t *testing.T, p sink.Predicate) {
			_ = p.(*anyOf)
		}},
		{"{type: session, window: 5s, of: {type: rt, target: 1s}}", func(t *testing.T, p sink.Predicate) {
			s := p.(*session)
			if s.t.window != 5*time.Second || sink.PredicateName(s.inner) != "rt" {
				t.Fatal("session")
			}
		}},
		{"{type: priority, limits: {0: 10, 2: 100}}", func(t *testing.T, p sink.Predicate) {
			if len(p.(*priority).levels) != 2 {
				t.Fatal("priority")
			}
		}},
		{"{type: group, group: g1, rate: 300}", func(t *testing.T, p sink.Predicate) {
			if p.(*GroupRate).Rate.Rate() != 300 {
				t.Fatal("group")
			}
		}},
		{`
type: rate
rate: 1000
modifiers:
  - {sampler: cpu, value: {80: 1, 90: 2}, factor: 20}
  - {sampler: queue, stage: Other, over: 100, duration: {0s: 1, 30s: 3}, interval: 500ms}
  - {sampler: rt, stage: Other, value: {500: 1}}
  - {sampler: heap, value: {1024: 1}}
  - {sampler: goroutines, value: {10000: 2}}
`, func(t *testing.T, p sink.Predicate) {
			m := p.(*modified)
			if len(m.mods) != 5 || m.mods[0].Factor != 20 || m.mods[1].Interval != 500*time.Millisecond ||
				m.mods[1].Over != 100 || m.mods[1].Duration[1].After != 30*time.Second {
				t.Fatalf("modifiers %+v", m.mods)
			}
			if sink.PredicateName(m) != "rate" {
				t.Fatal("a modified rate is still named rate")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.doc, func(t *testing.T) {
			env := Env{Stage: "S", Shared: NewShared()}
			p, err := fromYAML(parse(t, tt.doc), "stages.S.predicate", env)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, p)
			p.Accept(1) // usable
			if !inspect(p, func(string, float64) {}) {
				t.Fatal("not an Inspector")
			}
		})
	}
}

func TestFromYAMLErrors(t *testing.T) {
	tests := []struct {
		doc  string
		want string
	}{
		{"{type: bogus}", `line 1: p.type: unknown predicate type "bogus" (known: account, all, any, codel, cost, counter, gradient, group, multiclass, priority, rate, red, rt, saturated`},
		{"{limit: 3}", "line 1: p.type: missing predicate type"},
		{"[1, 2]", "line 1: p: want a predicate mapping"},
		{"type: threshold\nlimit: 10\nlimt: 3\n", "line 3: p.limt: unknown key"},
		{"type: threshold\n", "p.limit: threshold needs a limit"},
		{"type: threshold\nlimit: -1\n", "line 2: p.limit: limit must be >= 0"},
		// whole numbers: yaml.v3 alone would truncate these
		{"type: threshold\nlimit: 1.5\n", `line 2: p.limit: want a whole number, got "1.5"`},
		{"type: counter\nlimit: 2.9\n", `line 2: p.limit: want a whole number, got "2.9"`},
		{"type: rate\nrate: 10\ndepth: 0.5\n", `line 3: p.depth: want a whole number, got "0.5"`},
		{"type: rate\nrate: 10\ndepth: 1e30\n", `line 3: p.depth: 1e30 is out of range for int`},
		{"type: rt\ntarget: 1s\nnreq: 99.9\n", `line 3: p.nreq: want a whole number, got "99.9"`},
		{"type: rt\ntarget: 1s\ndepth: -.inf\n", `line 3: p.depth: want a whole number, got "-.inf"`},
		{"type: rt\ntarget: 1s\nenabled: maybe\n", `line 3: p.enabled: want a bool value, got "maybe"`},
		{"type: multiclass\ntargets: {0: 1s}\nlowCount: 1.5\n", `line 3: p.lowCount: want a whole number, got "1.5"`},
		{"type: multiclass\ntargets:\n  0.5: 1s\n", `line 3: p.targets.0.5: want a whole number, got "0.5"`},
		{"type: session\nmaxSessions: 10.5\nof: {type: threshold, limit: 1}\n", `line 2: p.maxSessions: want a whole number, got "10.5"`},
		{"type: priority\nlimits: {0: 2.5}\n", `line 2: p.limits.0: want a whole number, got "2.5"`},
		{"type: priority\nlimits:\n  1.5: 10\n", `line 3: p.limits.1.5: want a whole number, got "1.5"`},
		{"type: group\ngroup: g\nrate: 1\ndepth: 3.5\n", `line 4: p.depth: want a whole number, got "3.5"`},
		{"type: red\nmin: 1\ngentle: maybe\n", `line 3: p.gentle: want a bool value, got "maybe"`},
		{"type: rate\nrate: fast\n", `line 2: p.rate: want a float64 value, got "fast"`},
		{"type: rate\nrate: 0\n", "line 2: p.rate: rate must be positive"},
		{"type: rate\n", "p.rate: missing rate"},
		{"type: rt\ntarget: 5 parsecs\n", `line 2: p.target: bad duration "5 parsecs"`},
		{"type: rt\n", "p.target: rt needs a positive"},
		{"type: rt\ntarget: 1s\nmode: turbo\n", `line 3: p.mode: unknown mode "turbo"`},
		{"type: rt\ntarget: 1s\nalpha: 2\n", "alpha must be in [0,1)"},
		{"type: multiclass\ntargets: {}\n", "line 2: p.targets: multiclass needs targets"},
		{"type: multiclass\ntargets:\n  0: 1s\n  1: soon\n", `line 4: p.targets.1: bad duration "soon"`},
		{"type: counter\nlimit: 0\n", "line 2: p.limit: limit must be >= 1"},
		{"type: saturated\nthreads: -1\nof: {type: threshold, limit: 0}\n", "line 2: p.threads: saturated needs threads >= 0"},
		{"type: saturated\nthreads: 4\n", "p.of: saturated needs the predicate applied once the pool is full"},
		{"type: cost\nlimit: 5\nmax: 9\n", "line 3: p.max: max needs a target"},
		{"type: cost\nlimit: 5\ntarget: 1s\nmin: 9\n", "outside [min 9"},
		{"type: account\nmax: -1\n", "line 2: p.max: must not be negative"},
		{"type: vegas\ntolerance: 2\n", "line 2: p.tolerance: tolerance applies to type gradient, not vegas"},
		{"type: gradient\nmin: 10\nmax: 5\n", "limit max 5 below min 10"},
		{"type: gradient\ntolerance: 0.5\n", "tolerance must be >= 1"},
		{"type: vegas\ninitial: -1\n", "must not be negative"},
		{"type: red\nmin: 10\nmax: 5\n", "line 3: p.max: max (5) must be above min (10)"},
		{"type: all\nof: []\n", "line 2: p.of: want a non-empty list"},
		{"type: all\nof:\n  - {type: threshold, limit: 1}\n  - {type: nope}\n", `line 4: p.of[1].type: unknown predicate type "nope"`},
		{"type: session\n", "p.of: session needs the predicate"},
		{"type: session\nof: {type: rate}\n", "p.of.rate: missing rate"},
		{"type: group\nrate: 10\n", "p.group: group predicate needs a group name"},
		{"type: group\ngroup: a\nname: b\nrate: 10\n", `line 3: p.name: name "b" and group "a" disagree`},
		{"type: group\ngroup: unknown\n", `line 1: p.rate: group "unknown" has no rate: give it here or in another block naming the group`},
		{"type: priority\nlimits: {0: -1}\n", "p.limits.0: limit must not be negative"},
		{"type: rate\nrate: 1\nmodifiers:\n  - {sampler: disk, value: {1: 1}}\n", `line 4: p.modifiers[0].sampler: unknown sampler "disk"`},
		{"type: rate\nrate: 1\nmodifiers:\n  - {sampler: queue, value: {1: 1}}\n", `line 4: p.modifiers[0].stage: sampler "queue" needs a stage`},
		{"type: rate\nrate: 1\nmodifiers:\n  - {sampler: cpu}\n", "p.modifiers[0]: a modifier needs either value"},
		{"type: rate\nrate: 1\nmodifiers:\n  - sampler: cpu\n    value: {high: 1}\n", "line 5: p.modifiers[0].value.high: threshold must be a number"},
		{"type: rate\nrate: 1\nmodifiers:\n  - sampler: cpu\n    over: 90\n    duration: {soon: 1}\n", `line 6: p.modifiers[0].duration.soon: bad duration "soon"`},
		{"type: rate\nrate: 1\nmodifiers:\n  - sampler: cpu\n    duration: {0s: 1}\n", "p.modifiers[0].over: a duration template needs over"},
		{"type: rate\nrate: 1\nmodifiers:\n  - sampler: cpu\n    value: {80: -1}\n", "line 5: p.modifiers[0].value.80: degree must be a non-negative number"},
	}
	for _, tt := range tests {
		t.Run(tt.doc, func(t *testing.T) {
			_, err := fromYAML(parse(t, tt.doc), "p", Env{Shared: NewShared()})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v\nwant it to contain %q", err, tt.want)
			}
			if !errors.Is(err, yamlstrict.ErrInvalid) {
				t.Fatalf("error %v does not wrap yamlstrict.ErrInvalid", err)
			}
		})
	}
}

func TestFromYAMLGroupSharedAcrossStages(t *testing.T) {
	env := Env{Shared: NewShared()}
	a, err := fromYAML(parse(t, "{type: group, group: g, rate: 10, depth: 3}"), "a", env)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fromYAML(parse(t, "{type: group, name: g}"), "b", env)
	if err != nil {
		t.Fatal(err)
	}
	if count(a, 1, 2)+count(b, 1, 2) != 3 {
		t.Fatal("stages do not share the group's bucket")
	}
	if _, err := fromYAML(parse(t, "{type: group, group: g, rate: 20}"), "c", env); err == nil ||
		!strings.Contains(err.Error(), "conflicting") {
		t.Fatalf("conflict: %v", err)
	}
	if _, err := fromYAML(parse(t, "{type: group, group: g, rate: 20}"), "c", Env{}); err == nil {
		t.Fatal("group without Env.Shared accepted")
	}
}

// Session blocks naming one table share it across stages; a block
// giving the table another window is an error at its table key.
func TestFromYAMLSessionTableShared(t *testing.T) {
	env := Env{Shared: NewShared()}
	a, err := fromYAML(parse(t, "{type: session, table: shop, window: 5s, of: {type: threshold, limit: 10}}"), "a", env)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fromYAML(parse(t, "{type: session, table: shop, window: 5s, of: {type: counter, limit: 3}}"), "b", env)
	if err != nil {
		t.Fatal(err)
	}
	if a.(*session).Table() != b.(*session).Table() {
		t.Fatal("two session blocks naming table shop do not share it")
	}
	own, err := fromYAML(parse(t, "{type: session, window: 5s, of: {type: counter, limit: 3}}"), "c", env)
	if err != nil {
		t.Fatal(err)
	}
	if own.(*session).Table() == a.(*session).Table() {
		t.Fatal("a session block without a table shares one")
	}
	_, err = fromYAML(parse(t, "{type: session, table: shop, of: {type: counter, limit: 3}}"), "d", env)
	if err == nil || !strings.Contains(err.Error(), "d.table") || !strings.Contains(err.Error(), "conflicting") {
		t.Fatalf("a block giving table shop the default window: %v, want a conflict at d.table", err)
	}
	if _, err := fromYAML(parse(t, "{type: session, table: shop, of: {type: counter, limit: 3}}"), "e", Env{}); err == nil {
		t.Fatal("a shared table without Env.Shared was accepted")
	}
}

// A group block without a rate may come before or after the block that
// gives the rate, once every block has been through DeclareGroups.
func TestDeclareGroupsOrderDoesNotMatter(t *testing.T) {
	withRate := "{type: group, group: g, rate: 10, depth: 3}"
	tests := []struct {
		name   string
		blocks []string
	}{
		{"rate first", []string{withRate, "{type: group, group: g}"}},
		{"rate later", []string{"{type: group, name: g}", withRate}},
		{"rate later, nested", []string{
			"{type: all, of: [{type: threshold, limit: 5}, {type: group, group: g}]}",
			"{type: session, of: {type: any, of: [" + withRate + "]}}",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(0, 0) // a still clock: no tokens refill
			env := Env{Shared: NewShared(), Now: func() time.Time { return now }}
			for i, b := range tt.blocks {
				if err := declareGroups(parse(t, b), fmt.Sprint("s", i), env); err != nil {
					t.Fatal(err)
				}
			}
			if got := env.Shared.Groups(); len(got) != 1 || got[0] != "g" {
				t.Fatalf("groups %v, want [g]", got)
			}
			var ps []sink.Predicate
			for i, b := range tt.blocks {
				p, err := fromYAML(parse(t, b), fmt.Sprint("s", i), env)
				if err != nil {
					t.Fatalf("block %d: %v", i, err)
				}
				ps = append(ps, p)
			}
			// one bucket of depth 3 for both blocks
			if n := count(ps[0], 1, 2) + count(ps[1], 1, 2); n != 3 {
				t.Fatalf("%d of 4 admitted through a group of depth 3", n)
			}
		})
	}
}

func TestDeclareGroupsErrors(t *testing.T) {
	tests := []struct{ doc, want string }{
		{"{type: group, group: g, rate: 10}\n---\n{type: group, group: g, rate: 20}", "line 1: p: enqueuepred: group rate declared with conflicting parameters"},
		{"type: all\nof:\n  - {type: group, group: g, rate: 0}\n", "line 3: p.of[0].rate: rate must be positive"},
		{"type: session\nof: {type: group, rate: 1}\n", "line 2: p.of.group: group predicate needs a group name"},
	}
	for _, tt := range tests {
		t.Run(tt.doc, func(t *testing.T) {
			env := Env{Shared: NewShared()}
			var err error
			for doc := range strings.SplitSeq(tt.doc, "\n---\n") {
				if err = declareGroups(parse(t, doc), "p", env); err != nil {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, yamlstrict.ErrInvalid) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
	// other types and malformed blocks are FromYAML's to report
	for _, doc := range []string{"{type: threshold, limit: x}", "{type: nope}", "[1]", "{type: all, of: 3}", "{type: group, group: g}"} {
		if err := declareGroups(parse(t, doc), "p", Env{Shared: NewShared()}); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func FuzzFromYAML(f *testing.F) {
	seeds := []string{
		"{type: threshold, limit: 1000}",
		"{type: rate, rate: 5000, depth: 100}",
		"{type: rt, target: 500ms, mode: thesis}",
		"{type: multiclass, targets: {0: 2s, 1: 500ms}}",
		"{type: counter, limit: 64}",
		"{type: all, of: [{type: threshold, limit: 10}, {type: rate, rate: 100}]}",
		"{type: session, of: {type: red, min: 3}}",
		"{type: rate, rate: 1, modifiers: [{sampler: queue, stage: A, over: 1, duration: {0s: 1}}]}",
		"{type: group, group: g, rate: 5}",
		"{type: priority, limits: {0: 1}}",
		"{type: any, of: [{type: codel}]}",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if len(doc) > 2048 {
			return // predicate blocks are short; long inputs only slow the fuzzer
		}
		var n yaml.Node
		if yaml.Unmarshal([]byte(doc), &n) != nil {
			return
		}
		p, err := fromYAML(&n, "p", Env{Shared: NewShared(), Lookup: func(string) (sink.Sink, bool) { return nil, false }})
		if err != nil {
			if !errors.Is(err, yamlstrict.ErrInvalid) && !errors.Is(err, ErrBadConfig) {
				t.Fatalf("error %v wraps neither ErrInvalid nor ErrBadConfig", err)
			}
			return
		}
		q := sink.NewQueue(4)
		q.SetPredicate(p)
		for i := 0; i < 8; i++ {
			_ = q.Enqueue(ev{class: i % 3, id: "s"})
		}
		sink.Done(p, ev{}, time.Millisecond, time.Millisecond)
		inspect(p, func(string, float64) {})
	})
}
