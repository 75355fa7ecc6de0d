package enqueuepred

import (
	"slices"

	"github.com/sandstorm-go/sandstorm/sink"
)

// All admits an event only if every child admits it. Children are asked in
// order; when one refuses, the children that had already admitted the event
// get a sink.Cancel, so tokens and credits are not lost. Use it to combine,
// say, a stage's own rate with a group rate (JOBS: the least of the two).
type All struct{ composed }

// Any admits an event if at least one child admits it. Children are asked
// in order until one admits; the others are then charged (charger) so that
// every child accounts for the event and the later Done balances.
type Any struct{ composed }

var (
	_ sink.Composite = (*All)(nil)
	_ sink.Composite = (*Any)(nil)
)

// NewAll returns the conjunction of ps (no children: accept everything).
func NewAll(ps ...sink.Predicate) *All { return &All{newComposed(ps)} }

// NewAny returns the disjunction of ps (no children: reject everything
// rejectable).
func NewAny(ps ...sink.Predicate) *Any { return &Any{newComposed(ps)} }

// Name implements sink.Namer.
func (a *All) Name() string { return "all" }

// Accept implements sink.Predicate.
func (a *All) Accept(e sink.Event) bool {
	if IsNonRejectable(e) {
		a.charge(e)
		return true
	}
	for i, c := range a.children {
		if !c.Accept(e) {
			for _, back := range a.children[:i] {
				sink.Cancel(back, e)
			}
			return a.no()
		}
	}
	return a.yes()
}

// Name implements sink.Namer.
func (a *Any) Name() string { return "any" }

// Accept implements sink.Predicate.
func (a *Any) Accept(e sink.Event) bool {
	if IsNonRejectable(e) {
		a.charge(e)
		return true
	}
	for i, c := range a.children {
		if c.Accept(e) {
			for j, other := range a.children {
				if j != i {
					charge(other, e)
				}
			}
			return a.yes()
		}
	}
	return a.no()
}

// composed is what All and Any share: their children, charging and
// inspection. The runtime's hooks (Bind, Done, Cancel, Shed) reach the
// children through sink.Composite, not through composed.
type composed struct {
	counts
	children []sink.Predicate
	prefixes []string
}

func newComposed(ps []sink.Predicate) composed {
	prefixes := make([]string, len(ps))
	for i, p := range ps {
		prefixes[i] = childPrefix(i, p)
	}
	return composed{children: slices.Clone(ps), prefixes: prefixes}
}

// Children implements sink.Composite.
func (a *composed) Children() []sink.Predicate { return a.children }

// charge implements charger.
func (a *composed) charge(e sink.Event) {
	for _, c := range a.children {
		charge(c, e)
	}
	a.accepted.Add(1)
}

// Inspect implements Inspector.
func (a *composed) Inspect(report func(string, float64)) {
	a.inspect(report)
	for i, p := range a.children {
		Inspect(p, prefixed(a.prefixes[i], report))
	}
}
