package enqueuepred

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/sink"
)

// priced is an event with its own cost estimate.
type priced struct {
	cost float64
	must bool
}

func (p priced) Cost() float64       { return p.cost }
func (p priced) NonRejectable() bool { return p.must }

type costly struct{ cost float64 }

func (c costly) Principal() Principal { return Principal{ID: "s", Cost: c.cost} }

func TestCostOf(t *testing.T) {
	tests := []struct {
		e    sink.Event
		want float64
	}{
		{priced{cost: 10}, 10},
		{priced{cost: -3}, 0},
		{costly{cost: 2.5}, 2.5},
		{costly{}, 1}, // unknown principal cost
		{"plain", 1},
	}
	for _, tt := range tests {
		if got := costOf(tt.e); got != tt.want {
			t.Errorf("CostOf(%#v) = %v, want %v", tt.e, got, tt.want)
		}
	}
}

// TestCostRejectsExpensiveFirst: under load the full-quality request (10)
// is refused while the low-quality one (1) still fits (Whirlwind Fig. 1b).
func TestCostRejectsExpensiveFirst(t *testing.T) {
	c := newCost(12)
	full, low := priced{cost: 10}, priced{cost: 1}
	steps := []struct {
		e    sink.Event
		want bool
	}{
		{full, true}, // 10
		{full, false},
		{low, true}, // 11
		{full, false},
		{low, true},  // 12
		{low, false}, // 13 > 12
	}
	for i, s := range steps {
		if got := c.Accept(s.e); got != s.want {
			t.Fatalf("step %d: Accept(%v) = %v, want %v (outstanding %v)", i, s.e, got, s.want, c.Outstanding())
		}
	}
	if !c.Accept(priced{cost: 5, must: true}) || c.Outstanding() != 17 {
		t.Fatalf("non-rejectable: outstanding %v", c.Outstanding())
	}
	sink.Done(c, full, 0, 0)
	sink.Cancel(c, priced{cost: 5})
	if c.Outstanding() != 2 || !c.Accept(full) {
		t.Fatalf("after Done and Cancel: outstanding %v", c.Outstanding())
	}
	if admitMany(c, []sink.Event{low, low}) || c.Outstanding() != 12 {
		t.Fatalf("AcceptMany over the limit: outstanding %v", c.Outstanding())
	}
	sink.Done(c, full, 0, 0)
	if !admitMany(c, []sink.Event{low, low}) || c.Outstanding() != 4 {
		t.Fatalf("AcceptMany within the limit: outstanding %v", c.Outstanding())
	}
	for i := 0; i < 100; i++ { // more Done than admitted never goes below 0
		sink.Done(c, full, 0, 0)
	}
	if c.Outstanding() != 0 {
		t.Fatalf("outstanding %v", c.Outstanding())
	}
	m := inspectMap(c)
	if m["limit"] != 12 || m["accepted"] == 0 || m["rejected"] == 0 {
		t.Fatalf("inspect %v", m)
	}
}

func TestCostFromYAML(t *testing.T) {
	node := func(s string) *yaml.Node {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(s), &n); err != nil {
			t.Fatal(err)
		}
		return &n
	}
	p, err := fromYAML(node("{type: cost, limit: 12}"), "p", Env{})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := p.(*costLimit); !ok || c.Limit() != 12 {
		t.Fatalf("built %#v", p)
	}
	for doc, want := range map[string]string{
		"{type: cost}":             "p.limit: cost needs a limit",
		"{type: cost, limit: 0}":   "p.limit: limit must be positive",
		"{type: cost, limit: lot}": "p.limit: want a float64 value",
		"{type: cost, limt: 3}":    "p.limt: unknown key",
	} {
		_, err := fromYAML(node(doc), "p", Env{})
		if !errors.Is(err, yamlstrict.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}
