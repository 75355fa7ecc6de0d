package threadpool

import (
	"errors"
	"fmt"
)

// ErrNotRetunable is wrapped by Retune's error for the part of a new
// configuration that a running pool cannot take in place: turning its
// controller on or off, changing the controller's type, or the bounds of
// a NewSizer sizer (made once, with its bounds).
var ErrNotRetunable = errors.New("threadpool: cannot change in place")

// bounds returns the pool's current Min and Max.
func (p *Pool) bounds() (lo, hi int) {
	b := p.limits.Load()
	return int(int32(b >> 32)), int(int32(b))
}

func (p *Pool) storeBounds(lo, hi int) {
	p.limits.Store(uint64(uint32(lo))<<32 | uint64(uint32(hi)))
}

// Retune applies cfg's bounds (Min, Max) and controller settings to the
// pool while it runs, as a configuration reload does; Initial, Logger,
// Clock and SingleThreaded keep their values. The pool grows or shrinks
// at once into the new bounds (a worker in a batch leaves when the batch
// is done); the controller keeps what it has measured and ticks with the
// new settings from its next tick on. A SingleThreaded pool keeps its one
// worker. What cannot change in place (see ErrNotRetunable) is left as it
// is and named in the error; the rest is applied. cfg.Controller must be
// valid (ControllerConfig.Validate).
func (p *Pool) Retune(cfg Config) error {
	if p.cfg.SingleThreaded {
		return nil
	}
	if err := cfg.Controller.Validate(); err != nil {
		return err
	}
	want := cfg
	want.SingleThreaded, want.Initial = false, 0
	want = want.withDefaults()
	var errs []error
	if want.Controller.Enabled != p.cfg.Controller.Enabled {
		errs = append(errs, fmt.Errorf("%w: controller enabled %v → %v (Max > Min turns it on unless `enabled: false`)",
			ErrNotRetunable, p.cfg.Controller.Enabled, want.Controller.Enabled))
	}
	if typeOf(want.Controller) != typeOf(p.cfg.Controller) || want.Controller.NewSizer != nil {
		errs = append(errs, fmt.Errorf("%w: controller type %s → %s", ErrNotRetunable, typeOf(p.cfg.Controller), typeOf(want.Controller)))
	} else {
		p.retuneController(want.Controller)
	}
	lo, hi := p.bounds()
	if want.Min != lo || want.Max != hi {
		if p.cfg.Controller.NewSizer != nil {
			errs = append(errs, fmt.Errorf("%w: bounds of a NewSizer sizer", ErrNotRetunable))
		} else {
			p.setBounds(want.Min, want.Max)
		}
	}
	select { // the control goroutine reads its settings again
	case p.retuned <- struct{}{}:
	default:
	}
	return errors.Join(errs...)
}

// typeOf names a controller configuration's type.
func typeOf(c ControllerConfig) string {
	if c.NewSizer != nil {
		return "NewSizer"
	}
	if c.Type == "" {
		return TypeSEDA
	}
	return c.Type
}

// retuneController gives the pool's controllers cc's settings; whether
// they are enabled stays.
func (p *Pool) retuneController(cc ControllerConfig) {
	if q := p.st.Queue(); q != nil {
		cc.QueueThreshold = FitQueueThreshold(cc.QueueThreshold, q.Capacity())
	}
	meter := cc
	meter.Enabled = p.other == nil && p.cfg.Controller.Enabled
	p.ctrl.setConfig(meter)
	if w, ok := p.other.(*Whirlwind); ok {
		w.setConfig(cc.Whirlwind)
	}
}

// setBounds moves the pool's bounds to [lo, hi] and its size into them.
func (p *Pool) setBounds(lo, hi int) {
	p.resizeMu.Lock()
	p.storeBounds(lo, hi)
	p.ctrl.setBounds(lo, hi)
	if w, ok := p.other.(*Whirlwind); ok {
		w.setBounds(lo, hi)
	}
	pinned := clamp(int(p.pinned.Load()), lo, hi)
	p.pinned.Store(int32(pinned))
	target := clamp(int(p.target.Load()), lo, hi)
	if !p.cfg.Controller.Enabled {
		target = pinned
	}
	p.resizeMu.Unlock()
	if p.started.Load() {
		p.resize(target)
	}
}

// setConfig replaces the controller's settings; what it has measured
// stays.
func (c *Controller) setConfig(cfg ControllerConfig) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg = cfg.withDefaults()
}

// setBounds replaces the controller's bounds; a thrashing limit stays
// within them.
func (c *Controller) setBounds(lo, hi int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.min, c.max = lo, hi
	if c.limit > hi {
		c.limit = 0
	}
	c.lim.Store(int32(c.limitLocked()))
}

func (w *Whirlwind) setConfig(cfg WhirlwindConfig) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cfg = cfg.withDefaults()
}

func (w *Whirlwind) setBounds(lo, hi int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.min, w.max = lo, hi
}
