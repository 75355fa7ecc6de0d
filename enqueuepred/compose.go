package enqueuepred

import (
	"slices"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// All admits an event only if every child admits it. Children are asked in
// order; when one refuses, the children that had already admitted the event
// get a sink.Cancel, so tokens and credits are not lost. Use it to combine,
// say, a stage's own rate with a group rate (JOBS: the least of the two).
type All struct{ composed }

// Any admits an event if at least one child admits it. Children are asked
// in order until one admits; the others are then charged (Charger) so that
// every child accounts for the event and the later Done balances.
type Any struct{ composed }

var (
	_ sink.Completer = (*All)(nil)
	_ Composite      = (*All)(nil)
	_ sink.Completer = (*Any)(nil)
	_ Composite      = (*Any)(nil)
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
		a.Charge(e)
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
		a.Charge(e)
		return true
	}
	for i, c := range a.children {
		if c.Accept(e) {
			for j, other := range a.children {
				if j != i {
					Charge(other, e)
				}
			}
			return a.yes()
		}
	}
	return a.no()
}

// composed is what All and Any share: their children and every hook but
// Accept, which passes each event on to every child alike.
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

// Children implements Composite.
func (a *composed) Children() []sink.Predicate { return slices.Clone(a.children) }

// Charge implements Charger.
func (a *composed) Charge(e sink.Event) {
	for _, c := range a.children {
		Charge(c, e)
	}
	a.accepted.Add(1)
}

// Done implements sink.Completer.
func (a *composed) Done(e sink.Event, queued, service time.Duration) {
	for _, c := range a.children {
		sink.Done(c, e, queued, service)
	}
}

// Cancel implements sink.Canceler.
func (a *composed) Cancel(e sink.Event) {
	for _, c := range a.children {
		sink.Cancel(c, e)
	}
}

// Bind implements sink.Binder.
func (a *composed) Bind(s sink.Sink) {
	for _, p := range a.children {
		if b, ok := p.(sink.Binder); ok {
			b.Bind(s)
		}
	}
}

// Inspect implements Inspector.
func (a *composed) Inspect(report func(string, float64)) {
	a.inspect(report)
	for i, p := range a.children {
		Inspect(p, prefixed(a.prefixes[i], report))
	}
}
