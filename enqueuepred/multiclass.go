package enqueuepred

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// MulticlassConfig configures NewMulticlass's controller. Zero fields take
// defaults; RT holds the per-class controller parameters (its Target is
// ignored: Targets gives one per class).
type MulticlassConfig struct {
	// Targets maps each class to its p90 response-time target. Higher
	// classes are more important. An event of an unlisted class is treated
	// as the highest listed class below it, or the lowest listed class.
	Targets map[int]time.Duration
	RT      RTConfig
	// AdjLow divides the rates of lower classes when a class misses its
	// target; default 10.
	AdjLow float64
	// LowCount is how many times a class must miss its target while every
	// lower class is already at the minimum rate before its own rate is
	// cut; default 20.
	LowCount int
}

// multiclass is the thesis §7.2.3 multiclass response-time controller: one
// controller and one token bucket per class. When class c misses its
// target, the rates of all lower classes are divided by AdjLow and they may
// not increase at their next adjustment; only once every lower class is at
// the minimum rate, and c has missed its target LowCount times that way, is
// c's own rate cut. The lowest class cuts itself at once. The per-class
// increase and decrease follow RT.Mode.
type multiclass struct {
	classes []int // sorted ascending
	ctls    []*ctl
	p       []params
	adjLow  float64
	lcMax   int
	enabled atomic.Bool
	next    atomic.Int64
	fast    bool
	log     *slog.Logger
	rejects atomic.Uint64

	mu sync.Mutex
}

var (
	_ sink.Completer = (*multiclass)(nil)
	_ sink.Canceler  = (*multiclass)(nil)
	_ charger        = (*multiclass)(nil)
	_ Inspector      = (*multiclass)(nil)
)

// NewMulticlass returns the thesis §7.2.3 multiclass response-time
// controller (YAML `multiclass`): one controller and token bucket per
// class (ClassOf); when a class misses its target, the rates of all lower
// classes are cut first. Errors wrap ErrBadConfig.
func NewMulticlass(cfg MulticlassConfig) (sink.Predicate, error) {
	p, err := newMulticlass(cfg)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newMulticlass is NewMulticlass, returning the concrete type.
func newMulticlass(cfg MulticlassConfig) (*multiclass, error) {
	if len(cfg.Targets) == 0 {
		return nil, fmt.Errorf("%w: multiclass needs at least one class target", ErrBadConfig)
	}
	m := &multiclass{adjLow: cfg.AdjLow, lcMax: cfg.LowCount, log: cfg.RT.Logger, fast: cfg.RT.Mode != "thesis"}
	if m.adjLow == 0 {
		m.adjLow = 10
	}
	if m.adjLow < 1 {
		return nil, fmt.Errorf("%w: adjLow must be >= 1, got %v", ErrBadConfig, m.adjLow)
	}
	if m.lcMax <= 0 {
		m.lcMax = 20
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	for c := range cfg.Targets {
		m.classes = append(m.classes, c)
	}
	slices.Sort(m.classes)
	m.p = make([]params, len(m.classes))
	m.ctls = make([]*ctl, len(m.classes))
	var origin *bucket
	for i, class := range m.classes {
		rc := cfg.RT
		rc.Target = cfg.Targets[class]
		if rc.Mode == "thesis" {
			// Sandstorm's multiclass controller starts at 100/s, depth 1.
			if rc.InitialRate == 0 {
				rc.InitialRate = 100
			}
			if rc.Depth == 0 {
				rc.Depth = 1
			}
		}
		p, err := rc.params()
		if err != nil {
			return nil, fmt.Errorf("class %d: %w", class, err)
		}
		m.p[i] = p
		m.ctls[i] = newCtl(&m.p[i], cfg.RT.Now)
		if origin == nil {
			origin = m.ctls[i].b
		}
		m.ctls[i].b.clock = origin.clock // one time base for all classes
		m.ctls[i].lastRun = m.ctls[i].nowNS()
	}
	m.next.Store(m.ctls[0].lastRun + m.p[0].interval)
	m.enabled.Store(!cfg.RT.Disabled)
	return m, nil
}

// index maps a class to its controller.
func (m *multiclass) index(class int) int {
	i, found := slices.BinarySearch(m.classes, class)
	if found {
		return i
	}
	if i == 0 {
		return 0
	}
	return i - 1
}

// Name implements sink.Namer.
func (m *multiclass) Name() string { return "multiclass" }

// Accept implements sink.Predicate.
func (m *multiclass) Accept(e sink.Event) bool {
	c := m.ctls[m.index(ClassOf(e))]
	if m.fast {
		if now := c.nowNS(); now >= m.next.Load() && m.mu.TryLock() {
			m.runLocked(now)
			m.mu.Unlock()
		}
	}
	if c.admit(e, m.enabled.Load()) {
		return true
	}
	m.rejects.Add(1)
	return false
}

// charge implements charger.
func (m *multiclass) charge(e sink.Event) {
	c := m.ctls[m.index(ClassOf(e))]
	c.b.force(1)
	c.inSystem.Add(1)
	c.accepted.Add(1)
}

// Cancel implements sink.Canceler.
func (m *multiclass) Cancel(e sink.Event) {
	c := m.ctls[m.index(ClassOf(e))]
	c.b.refund(1)
	c.release()
}

// Done implements sink.Completer.
func (m *multiclass) Done(e sink.Event, queued, service time.Duration) {
	c := m.ctls[m.index(ClassOf(e))]
	c.release()
	now := c.nowNS()
	m.mu.Lock()
	if c.add(now, queued+service) {
		m.runLocked(now)
	}
	m.mu.Unlock()
}

// runLocked adjusts every class that is due, highest class first.
func (m *multiclass) runLocked(now int64) {
	m.next.Store(now + m.p[0].interval)
	for i := len(m.ctls) - 1; i >= 0; i-- {
		c := m.ctls[i]
		if !c.due(now) {
			continue
		}
		o := c.observe(now)
		if !m.enabled.Load() && !m.fast {
			continue
		}
		p := c.p
		switch {
		case o.err > p.errDec:
			found := false
			for _, lower := range m.ctls[:i] {
				lower.preempted = true
				if lower.rate > lower.p.rateMin {
					found = true
					lower.setRate(lower.rate / m.adjLow)
				}
			}
			if found {
				c.lc = 0
			} else if i == 0 {
				c.decreaseOwn(o)
			} else {
				c.lc++
				if c.lc >= m.lcMax {
					c.decreaseOwn(o)
				}
			}
		case p.mode == modeThesis:
			if o.err < p.errInc {
				if c.preempted {
					// A higher class missed its target: no increase.
					c.preempted = false
				} else {
					c.setRate(c.rate + p.adjInc*-(o.err-p.cInc))
					c.lc = 0
				}
			}
		default:
			if o.err < p.cInc {
				if c.preempted {
					c.preempted = false
				} else {
					c.lc = 0
					c.increaseFast(o)
				}
			}
		}
		m.log.Debug("multiclass controller", "class", m.classes[i], "p90", c.cur, "err", o.err, "rate", c.rate)
	}
}

// Classes returns the configured classes, ascending.
func (m *multiclass) Classes() []int { return slices.Clone(m.classes) }

// P90 returns the smoothed p90 response time of class (mapped like events).
func (m *multiclass) P90(class int) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Duration(m.ctls[m.index(class)].cur * 1e9)
}

// Rate returns the admission rate of class.
func (m *multiclass) Rate(class int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ctls[m.index(class)].rate
}

// SetTarget changes class's target while traffic flows.
func (m *multiclass) SetTarget(class int, d time.Duration) {
	if d <= 0 {
		return
	}
	m.mu.Lock()
	m.p[m.index(class)].target = d.Seconds()
	m.mu.Unlock()
}

// Rejected returns the rejections of class.
func (m *multiclass) Rejected(class int) uint64 { return m.ctls[m.index(class)].rejected.Load() }

// Accepted returns the admissions of class.
func (m *multiclass) Accepted(class int) uint64 { return m.ctls[m.index(class)].accepted.Load() }

// Enable turns admission control on.
func (m *multiclass) Enable() { m.enabled.Store(true) }

// Disable turns admission control off; measurement goes on.
func (m *multiclass) Disable() { m.enabled.Store(false) }

// Enabled reports whether admission control is on.
func (m *multiclass) Enabled() bool { return m.enabled.Load() }

// Inspect implements Inspector: per-class values are prefixed "class<N>.".
func (m *multiclass) Inspect(report func(string, float64)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	en := 0.0
	if m.enabled.Load() {
		en = 1
	}
	report("enabled", en)
	report("rejected", float64(m.rejects.Load()))
	for i, c := range m.ctls {
		c.inspect(prefixed("class"+strconv.Itoa(m.classes[i])+".", report))
	}
}
