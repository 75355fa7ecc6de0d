package enqueuepred

import (
	"slices"

	"github.com/sandstorm-go/sandstorm/sink"
)

// allOf admits an event only if every child admits it. Children are asked in
// order; when one refuses, the children that had already admitted the event
// get a sink.Cancel, so tokens and credits are not lost. Use it to combine,
// say, a stage's own rate with a group rate (JOBS: the least of the two).
type allOf struct{ composed }

// anyOf admits an event if at least one child admits it. Children are asked
// in order until one admits; the others are then charged (charger) so that
// every child accounts for the event and the later Done balances.
type anyOf struct{ composed }

var (
	_ sink.Composite = (*allOf)(nil)
	_ sink.Composite = (*anyOf)(nil)
)

// NewAll returns the conjunction of ps (no children: accept everything).
// Children are asked in order; when one refuses, those that had admitted
// the event get a sink.Cancel, so tokens and credits are not lost. Use it
// to combine, say, a stage's own rate with a group rate (JOBS: the least
// of the two).
func NewAll(ps ...sink.Predicate) sink.Predicate { return newAll(ps...) }

// newAll is NewAll, returning the concrete type.
func newAll(ps ...sink.Predicate) *allOf { return &allOf{newComposed(ps)} }

// NewAny returns the disjunction of ps (no children: reject everything
// rejectable). Children are asked in order until one admits; the others
// are then charged, so that every child accounts for the event and the
// later sink.Done balances.
func NewAny(ps ...sink.Predicate) sink.Predicate { return newAny(ps...) }

// newAny is NewAny, returning the concrete type.
func newAny(ps ...sink.Predicate) *anyOf { return &anyOf{newComposed(ps)} }

// Name implements sink.Namer.
func (a *allOf) Name() string { return "all" }

// Accept implements sink.Predicate.
func (a *allOf) Accept(e sink.Event) bool {
	if sink.IsNonRejectable(e) {
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
func (a *anyOf) Name() string { return "any" }

// Accept implements sink.Predicate.
func (a *anyOf) Accept(e sink.Event) bool {
	if sink.IsNonRejectable(e) {
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
		inspect(p, prefixed(a.prefixes[i], report))
	}
}
