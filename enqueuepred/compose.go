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
type All struct {
	counts
	children []sink.Predicate
	prefixes []string
}

// Any admits an event if at least one child admits it. Children are asked
// in order until one admits; the others are then charged (Charger) so that
// every child accounts for the event and the later Done balances.
type Any struct {
	counts
	children []sink.Predicate
	prefixes []string
}

var (
	_ sink.Completer = (*All)(nil)
	_ Composite      = (*All)(nil)
	_ sink.Completer = (*Any)(nil)
	_ Composite      = (*Any)(nil)
)

// NewAll returns the conjunction of ps (no children: accept everything).
func NewAll(ps ...sink.Predicate) *All {
	a := &All{children: slices.Clone(ps)}
	a.prefixes = prefixes(ps)
	return a
}

// NewAny returns the disjunction of ps (no children: reject everything
// rejectable).
func NewAny(ps ...sink.Predicate) *Any {
	a := &Any{children: slices.Clone(ps)}
	a.prefixes = prefixes(ps)
	return a
}

func prefixes(ps []sink.Predicate) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = childPrefix(i, p)
	}
	return out
}

// Name implements sink.Namer.
func (a *All) Name() string { return "all" }

// Children implements Composite.
func (a *All) Children() []sink.Predicate { return slices.Clone(a.children) }

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

// Charge implements Charger.
func (a *All) Charge(e sink.Event) {
	for _, c := range a.children {
		Charge(c, e)
	}
	a.accepted.Add(1)
}

// Done implements sink.Completer.
func (a *All) Done(e sink.Event, queued, service time.Duration) {
	for _, c := range a.children {
		sink.Done(c, e, queued, service)
	}
}

// Cancel implements sink.Canceler.
func (a *All) Cancel(e sink.Event) {
	for _, c := range a.children {
		sink.Cancel(c, e)
	}
}

// Bind implements sink.Binder.
func (a *All) Bind(s sink.Sink) { bindAll(a.children, s) }

// Inspect implements Inspector.
func (a *All) Inspect(report func(string, float64)) {
	a.inspect(report)
	inspectAll(a.children, a.prefixes, report)
}

// Name implements sink.Namer.
func (a *Any) Name() string { return "any" }

// Children implements Composite.
func (a *Any) Children() []sink.Predicate { return slices.Clone(a.children) }

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

// Charge implements Charger.
func (a *Any) Charge(e sink.Event) {
	for _, c := range a.children {
		Charge(c, e)
	}
	a.accepted.Add(1)
}

// Done implements sink.Completer.
func (a *Any) Done(e sink.Event, queued, service time.Duration) {
	for _, c := range a.children {
		sink.Done(c, e, queued, service)
	}
}

// Cancel implements sink.Canceler.
func (a *Any) Cancel(e sink.Event) {
	for _, c := range a.children {
		sink.Cancel(c, e)
	}
}

// Bind implements sink.Binder.
func (a *Any) Bind(s sink.Sink) { bindAll(a.children, s) }

// Inspect implements Inspector.
func (a *Any) Inspect(report func(string, float64)) {
	a.inspect(report)
	inspectAll(a.children, a.prefixes, report)
}

func bindAll(ps []sink.Predicate, s sink.Sink) {
	for _, p := range ps {
		if b, ok := p.(sink.Binder); ok {
			b.Bind(s)
		}
	}
}

func inspectAll(ps []sink.Predicate, prefixes []string, report func(string, float64)) {
	for i, p := range ps {
		Inspect(p, prefixed(prefixes[i], report))
	}
}
