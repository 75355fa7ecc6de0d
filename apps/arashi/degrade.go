package arashi

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Degrade selects service degradation (thesis §7.2.2, §7.3.4, Figs.
// 56–57): the stages with something to leave out lower a quality factor
// while their 90th-percentile response time exceeds the target of their
// rt predicate, and raise it slowly while it is below (enqueuepred.Degrader).
// At quality q
//   - ListFolders (/folders) counts the messages of each folder only while
//     q ≥ 0.5; below, it lists the folders without counts, the costly part;
//   - ListMessages (/list) lists max(5, q·PageSize) messages a page;
//   - Search (/search) returns at most max(5, q·PageSize) messages.
//
// The other request types have nothing to leave out.
type Degrade int

// The degradation modes.
const (
	// DegradeOff: full quality always; the rt predicates admit as
	// configured.
	DegradeOff Degrade = iota
	// DegradeAlone: degradation and no admission control: every stage's rt
	// controller only measures (Fig. 56).
	DegradeAlone
	// DegradeAdmission: degradation, and a degrading stage switches its rt
	// admission control on when its lowest quality is still over target
	// (off again below half the target, Fig. 57). The stages with nothing
	// to degrade keep their admission control: rejection is their lowest
	// quality.
	DegradeAdmission
)

// String is the mode's name: "off", "alone", "admission".
func (d Degrade) String() string {
	switch d {
	case DegradeOff:
		return "off"
	case DegradeAlone:
		return "alone"
	case DegradeAdmission:
		return "admission"
	}
	return "Degrade(" + strconv.Itoa(int(d)) + ")"
}

// degradable reports whether a request type has a quality knob.
func (k Kind) degradable() bool { return k == ListFolders || k == ListMessages || k == Search }

// MinPage is the fewest messages a degraded page lists.
const MinPage = 5

// pageSize is how many messages a list or search page holds at quality q.
func pageSize(q float64) int {
	return min(PageSize, max(MinPage, int(math.Round(q*PageSize))))
}

// withCounts reports whether the folders page counts messages at quality q.
func withCounts(q float64) bool { return q >= 0.5 }

// degrader is a stage's degradation state. The stage's rt predicate is
// looked up again after every configuration reload (stage.SignalReloaded),
// which may have replaced it: the new one is switched as the old one was,
// and the Degrader drives it.
type degrader struct {
	mode  Degrade
	deg   *enqueuepred.Degrader // nil: the stage does not degrade
	now   func() time.Time
	unsub func() // the SignalReloaded subscription
}

// initDegrade sets the stage's degradation up for the App's mode.
func (p *page) initDegrade(c *stage.Context) error {
	p.dg = degrader{mode: p.app.opts.Degrade, now: time.Now}
	if p.dg.mode == DegradeOff {
		return nil
	}
	if p.dg.mode != DegradeAlone && p.dg.mode != DegradeAdmission {
		return fmt.Errorf("arashi: unknown degradation mode %v", p.dg.mode)
	}
	st := c.Stage()
	rt := enqueuepred.ResponseTimeOf(st.Sink().Predicate())
	if rt == nil {
		return fmt.Errorf("arashi: %s: degradation needs an rt predicate on the stage, e.g. %s", p.kind.Handler(), DefaultPredicate)
	}
	if p.dg.mode == DegradeAlone {
		rt.Disable()
	}
	if p.kind.degradable() {
		var err error
		if p.dg.deg, err = enqueuepred.NewDegrader(rt, enqueuepred.DegraderConfig{
			Admission: p.dg.mode == DegradeAdmission, Logger: p.log}); err != nil {
			return fmt.Errorf("arashi: %s: %w", p.kind.Handler(), err)
		}
		c.Profile("quality", p.dg.deg.Quality)
		p.app.setDegrader(p.kind, p.dg.deg)
	}
	p.dg.unsub = c.Manager().SubscribeFunc(stage.SignalReloaded, func(sink.Event) { p.retarget(st.Sink().Predicate()) })
	return nil
}

// retarget applies the degradation mode to the stage's rt predicate after
// a reload, which may have installed a new one: alone, its admission
// control goes off; the Degrader, if any, drives it from now on.
func (p *page) retarget(pred sink.Predicate) {
	rt := enqueuepred.ResponseTimeOf(pred)
	if rt == nil {
		p.log.Warn("arashi: the reload left no rt predicate on the stage; its quality stays where it is")
	} else if p.dg.mode == DegradeAlone {
		rt.Disable()
	}
	if p.dg.deg != nil {
		p.dg.deg.Retarget(rt)
	}
}

// Destroy ends the stage's reload subscription.
func (p *page) Destroy() error {
	if p.dg.unsub != nil {
		p.dg.unsub()
	}
	return nil
}

// quality runs the stage's degrader (if any), which applies its
// admission wish to the stage's rt predicate; it returns the quality to
// serve at.
func (p *page) quality() float64 {
	if p.dg.deg == nil {
		return 1
	}
	return p.dg.deg.Observe(p.dg.now())
}

func (a *App) setDegrader(k Kind, d *enqueuepred.Degrader) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.degraders[k] = d
}

// Quality returns the current quality factor of a request type's stage: 1
// when it does not degrade (or has not started).
func (a *App) Quality(k Kind) float64 {
	a.mu.Lock()
	d := a.degraders[k]
	a.mu.Unlock()
	if d == nil {
		return 1
	}
	return d.Quality()
}

// Timing is where one request's time went on the server, as its request
// type's stage saw it.
type Timing struct {
	// Before is from the request's last byte parsed (http.Request.Received)
	// to its stage's handler taking it: HttpRecv's dispatch and the wait in
	// the stage's queue.
	Before time.Duration
	// Service is the handler's work: session, database, page.
	Service time.Duration
}

// RecordTimings makes the App keep a Timing of every request (off by
// default; for experiments: the memory grows with the requests). Timings
// returns them.
func (a *App) RecordTimings(on bool) { a.timing.Store(on) }

// Timings returns the recorded timings of request type k.
func (a *App) Timings(k Kind) []Timing {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Timing(nil), a.timings[k]...)
}

func (a *App) record(k Kind, t Timing) {
	a.mu.Lock()
	a.timings[k] = append(a.timings[k], t)
	a.mu.Unlock()
}

// ParseDegrade parses a mode's name ("off", "alone", "admission"; "" is
// "off").
func ParseDegrade(s string) (Degrade, error) {
	for _, d := range []Degrade{DegradeOff, DegradeAlone, DegradeAdmission} {
		if s == d.String() {
			return d, nil
		}
	}
	if s == "" {
		return DegradeOff, nil
	}
	return DegradeOff, fmt.Errorf("arashi: unknown degradation mode %q (off, alone, admission)", s)
}
