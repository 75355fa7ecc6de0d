package stage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/batching"
	"github.com/sandstorm-go/sandstorm/sink"
)

// ---- timers ----

// Timer is a pending timer event; Stop cancels it.
type Timer struct {
	set  *timerSet
	t    *time.Timer
	done atomic.Bool
}

// Stop cancels the timer. It reports whether it prevented the delivery.
func (t *Timer) Stop() bool {
	if !t.done.CompareAndSwap(false, true) {
		return false
	}
	t.t.Stop()
	t.set.remove(t)
	return true
}

type timerSet struct {
	m        *Manager
	mu       sync.Mutex
	pending  map[*Timer]struct{}
	stopped  bool
	rejected atomic.Uint64
	fired    atomic.Uint64
}

func (ts *timerSet) init(m *Manager) {
	ts.m = m
	ts.pending = map[*Timer]struct{}{}
}

func (ts *timerSet) remove(t *Timer) {
	ts.mu.Lock()
	delete(ts.pending, t)
	ts.mu.Unlock()
}

// stopAll cancels every pending timer and returns how many it cancelled.
func (ts *timerSet) stopAll() int {
	ts.mu.Lock()
	ts.stopped = true
	pending := ts.pending
	ts.pending = map[*Timer]struct{}{}
	ts.mu.Unlock()
	n := 0
	for t := range pending {
		if t.done.CompareAndSwap(false, true) {
			t.t.Stop()
			n++
		}
	}
	return n
}

// After enqueues e on s once d has passed. If s rejects the event when the
// timer fires, the rejection is counted (TimerRejections) and logged.
func (m *Manager) After(d time.Duration, s sink.Sink, e sink.Event) (*Timer, error) {
	ts := &m.timers
	t := &Timer{set: ts}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.stopped {
		return nil, ErrManagerClosed
	}
	ts.pending[t] = struct{}{}
	t.t = time.AfterFunc(d, func() {
		if !t.done.CompareAndSwap(false, true) {
			return
		}
		ts.remove(t)
		ts.fired.Add(1)
		if err := s.Enqueue(e); err != nil {
			ts.rejected.Add(1)
			m.log.Warn("timer event rejected", "sink", fmt.Sprint(s), "err", err)
		}
	})
	return t, nil
}

// At enqueues e on s at time when (at once if it has passed).
func (m *Manager) At(when time.Time, s sink.Sink, e sink.Event) (*Timer, error) {
	return m.After(time.Until(when), s, e)
}

// TimerStats returns how many timer events fired and how many of those the
// target sink rejected.
func (m *Manager) TimerStats() (fired, rejected uint64) {
	return m.timers.fired.Load(), m.timers.rejected.Load()
}

// ---- signals ----

// Built-in signals.
const (
	// SignalStagesInitialized is raised by Start once every stage is
	// initialized; its event is StagesInitialized.
	SignalStagesInitialized = "stages-initialized"
	// SignalShutdownStarted is raised when Shutdown begins, before intake
	// stops; sources (listeners, generators) should stop producing. Its
	// event is ShutdownStarted.
	SignalShutdownStarted = "shutdown-started"
)

// StagesInitialized is the event of SignalStagesInitialized.
type StagesInitialized struct{ Stages []string }

// ShutdownStarted is the event of SignalShutdownStarted.
type ShutdownStarted struct{}

type subscription struct {
	signal string
	s      sink.Sink
}

type signalBus struct {
	mu   sync.Mutex
	subs []*subscription
}

// Subscribe has every later Raise of signal enqueue its event on s. The
// returned function cancels the subscription.
func (m *Manager) Subscribe(signal string, s sink.Sink) (unsubscribe func()) {
	sub := &subscription{signal: signal, s: s}
	b := &m.signals
	b.mu.Lock()
	b.subs = append(b.subs, sub)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, x := range b.subs {
			if x == sub {
				b.subs = append(b.subs[:i], b.subs[i+1:]...)
				return
			}
		}
	}
}

// Raise enqueues ev on every sink subscribed to signal. It returns the
// subscribers' rejections, joined; every subscriber is tried.
func (m *Manager) Raise(signal string, ev sink.Event) error {
	b := &m.signals
	b.mu.Lock()
	var targets []sink.Sink
	for _, sub := range b.subs {
		if sub.signal == signal {
			targets = append(targets, sub.s)
		}
	}
	b.mu.Unlock()
	var errs []error
	for _, s := range targets {
		if err := s.Enqueue(ev); err != nil {
			errs = append(errs, fmt.Errorf("signal %s: %w", signal, err))
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) raiseLogged(signal string, ev sink.Event) {
	if err := m.Raise(signal, ev); err != nil {
		m.log.Warn("signal not delivered", "signal", signal, "err", err)
	}
}

// dropStage removes the subscriptions of a destroyed stage.
func (b *signalBus) dropStage(s *Stage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.subs[:0]
	for _, sub := range b.subs {
		if k, ok := sub.s.(*stageSink); ok && k.st == s {
			continue
		}
		kept = append(kept, sub)
	}
	clear(b.subs[len(kept):])
	b.subs = kept
}

// ---- batching controller driver ----

type batcher struct {
	s    *Stage
	ctrl *batching.Controller
}

func newBatcher(s *Stage, cfg batching.Config) *batcher {
	b := &batcher{s: s, ctrl: batching.New(cfg)}
	s.batchSize.Store(int32(b.ctrl.BatchSize()))
	return b
}

// Controller returns the stage's batching controller, or nil if disabled.
func (s *Stage) BatchingController() *batching.Controller {
	if s.batcher == nil {
		return nil
	}
	return s.batcher.ctrl
}

func (b *batcher) run(ctx context.Context, closed <-chan struct{}) {
	t := time.NewTicker(b.ctrl.Config().Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-closed:
			return
		case now := <-t.C:
			b.s.batchSize.Store(int32(b.ctrl.Observe(now, b.s.handled())))
		}
	}
}
