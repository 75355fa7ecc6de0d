package enqueuepred

import (
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/sink"
)

// priority gives events of higher-priority principals a larger share of the
// queue it guards: an event of priority p is admitted while the queue holds
// fewer than Limits[p] events. An unlisted priority uses the limit of the
// highest listed priority below it, or of the lowest listed one. Events
// without a principal have priority 0. Unbound, it accepts everything.
type priority struct {
	boundSink
	counts
	levels []int
	limits []atomic.Int64
	rej    []atomic.Uint64
}

// NewPriority returns a predicate (YAML `priority`) giving events of
// higher-priority principals a larger share of the queue it guards: an
// event of priority p (PriorityOf) is admitted while the queue holds fewer
// than limits[p] events; an unlisted priority uses the limit of the
// highest listed one below it, or of the lowest listed one.
func NewPriority(limits map[int]int) (sink.Predicate, error) {
	p, err := newPriority(limits)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newPriority is NewPriority, returning the concrete type.
func newPriority(limits map[int]int) (*priority, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: priority needs at least one level", ErrBadConfig)
	}
	p := &priority{}
	for lvl := range limits {
		p.levels = append(p.levels, lvl)
	}
	slices.Sort(p.levels)
	p.limits = make([]atomic.Int64, len(p.levels))
	p.rej = make([]atomic.Uint64, len(p.levels))
	for i, lvl := range p.levels {
		p.limits[i].Store(int64(limits[lvl]))
	}
	return p, nil
}

func (p *priority) index(prio int) int {
	i, found := slices.BinarySearch(p.levels, prio)
	if found || i == 0 {
		return i
	}
	return i - 1
}

// Name implements sink.Namer.
func (p *priority) Name() string { return "priority" }

// Accept implements sink.Predicate.
func (p *priority) Accept(e sink.Event) bool {
	n := p.len()
	if n < 0 || sink.IsNonRejectable(e) {
		return p.yes()
	}
	i := p.index(PriorityOf(e))
	if int64(n) >= p.limits[i].Load() {
		p.rej[i].Add(1)
		return p.no()
	}
	return p.yes()
}

// charge implements charger.
func (p *priority) charge(sink.Event) { p.accepted.Add(1) }

// SetLimit changes the limit of a listed priority level while traffic flows.
func (p *priority) SetLimit(prio, limit int) error {
	i, found := slices.BinarySearch(p.levels, prio)
	if !found {
		return fmt.Errorf("%w: priority level %d is not configured", ErrBadConfig, prio)
	}
	p.limits[i].Store(int64(limit))
	return nil
}

// Inspect implements Inspector.
func (p *priority) Inspect(report func(string, float64)) {
	report("length", float64(p.len()))
	for i, lvl := range p.levels {
		s := strconv.Itoa(lvl)
		report("priority"+s+".limit", float64(p.limits[i].Load()))
		report("priority"+s+".rejected", float64(p.rej[i].Load()))
	}
	p.inspect(report)
}
