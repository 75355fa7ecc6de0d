package enqueuepred

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// AccountingConfig configures NewAccounting's predicate.
type AccountingConfig struct {
	// Max is how many principals are accounted for separately (default
	// 100); events of further principals are accounted under "other".
	Max int
}

// accounting is Whirlwind's resource accounting per principal (§III.C):
// it wraps a predicate (nil: admit everything) and counts, for each
// principal (PrincipalOf(e).ID; "anonymous" for events without one), the
// events admitted, refused and handled and the handler time and queueing
// time they took (from sink.Done). It is a sink.ServiceSharer: an event
// handled in a batch is charged its share of the batch's handler time
// (the batch's time divided by its length; the runtime cannot see inside
// a handler), so a principal is charged the time its events took, not
// that time once per event of the batch.
// Inspect reports them as principal.<id>.<value>, which the profiler
// publishes as metrics <stage>.predicate.principal.<id>.<value>.
type accounting struct {
	inner sink.Predicate
	kids  []sink.Predicate // inner, for Children (nil without one)
	max   int

	mu   sync.RWMutex
	byID map[string]*principalAccount
}

type principalAccount struct {
	admitted, rejected, done atomic.Uint64
	service, queued          atomic.Int64 // ns
}

// principalUsage is one principal's account.
type principalUsage struct {
	Admitted, Rejected, Done uint64
	Service, Queued          time.Duration
}

var (
	_ sink.Completer     = (*accounting)(nil)
	_ sink.ServiceSharer = (*accounting)(nil)
	_ charger            = (*accounting)(nil)
	_ sink.Composite     = (*accounting)(nil)
	_ Inspector          = (*accounting)(nil)
)

// NewAccounting returns Whirlwind's per-principal resource accounting
// (§III.C, YAML `account`) around inner (nil: admit everything): events
// admitted, refused and handled and their handler and queueing times per
// principal, reported through Inspector as principal.<id>.<value>. An
// event handled in a batch is charged its share of the batch's handler
// time (sink.ServiceSharer).
func NewAccounting(inner sink.Predicate, cfg AccountingConfig) sink.Predicate {
	return newAccounting(inner, cfg)
}

// newAccounting is NewAccounting, returning the concrete type.
func newAccounting(inner sink.Predicate, cfg AccountingConfig) *accounting {
	if cfg.Max <= 0 {
		cfg.Max = 100
	}
	a := &accounting{inner: inner, max: cfg.Max, byID: map[string]*principalAccount{}}
	if inner != nil {
		a.kids = []sink.Predicate{inner}
	}
	return a
}

// Name implements sink.Namer.
func (a *accounting) Name() string { return "account" }

// Children implements sink.Composite: the wrapped predicate, if any.
func (a *accounting) Children() []sink.Predicate { return a.kids }

func (a *accounting) account(e sink.Event) *principalAccount {
	id := "anonymous"
	if p, ok := PrincipalOf(e); ok && p.ID != "" {
		id = p.ID
	}
	a.mu.RLock()
	acc := a.byID[id]
	a.mu.RUnlock()
	if acc != nil {
		return acc
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if acc = a.byID[id]; acc != nil {
		return acc
	}
	if len(a.byID) >= a.max {
		id = "other"
		if acc = a.byID[id]; acc != nil {
			return acc
		}
	}
	acc = &principalAccount{}
	a.byID[id] = acc
	return acc
}

// Accept implements sink.Predicate.
func (a *accounting) Accept(e sink.Event) bool {
	acc := a.account(e)
	if a.inner == nil || a.inner.Accept(e) {
		acc.admitted.Add(1)
		return true
	}
	acc.rejected.Add(1)
	return false
}

// charge implements charger.
func (a *accounting) charge(e sink.Event) {
	if a.inner != nil {
		charge(a.inner, e)
	}
	a.account(e).admitted.Add(1)
}

// Done implements sink.Completer: it accounts for e. (The wrapped
// predicate gets its own Done from the sink, through sink.Composite.)
func (a *accounting) Done(e sink.Event, queued, service time.Duration) {
	acc := a.account(e)
	acc.done.Add(1)
	acc.service.Add(int64(service))
	acc.queued.Add(int64(queued))
}

// SharesService implements sink.ServiceSharer: Done's service is the
// event's share of its batch's handler time.
func (a *accounting) SharesService() {}

// usage returns every principal's account.
func (a *accounting) usage() map[string]principalUsage {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make(map[string]principalUsage, len(a.byID))
	for id, acc := range a.byID {
		out[id] = principalUsage{
			Admitted: acc.admitted.Load(), Rejected: acc.rejected.Load(), Done: acc.done.Load(),
			Service: time.Duration(acc.service.Load()), Queued: time.Duration(acc.queued.Load()),
		}
	}
	return out
}

// metricName keeps a principal ID usable inside a metric name.
func metricName(id string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, id)
}

// Inspect implements Inspector: principal.<id>.{admitted, rejected, done,
// service_s, queued_s}, then the wrapped predicate's values.
func (a *accounting) Inspect(report func(string, float64)) {
	u := a.usage()
	ids := make([]string, 0, len(u))
	for id := range u {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		v := u[id]
		p := "principal." + metricName(id) + "."
		report(p+"admitted", float64(v.Admitted))
		report(p+"rejected", float64(v.Rejected))
		report(p+"done", float64(v.Done))
		report(p+"service_s", v.Service.Seconds())
		report(p+"queued_s", v.Queued.Seconds())
	}
	if a.inner != nil {
		inspect(a.inner, prefixed("0."+sink.PredicateName(a.inner)+".", report))
	}
}
