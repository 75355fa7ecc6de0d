package stage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	f      func(sink.Event) // SubscribeFunc's, instead of s
}

type signalBus struct {
	mu   sync.Mutex
	subs []*subscription
	// memory is the resource pressure the memory monitor announced, which
	// every predicate installed later starts with (signal_memory.go).
	memory pressureState
}

// Subscribe has every later Raise of signal enqueue its event on s. The
// returned function cancels the subscription.
func (m *Manager) Subscribe(signal string, s sink.Sink) (unsubscribe func()) {
	return m.subscribe(&subscription{signal: signal, s: s})
}

// SubscribeFunc has every later Raise of signal call f with its event, in
// the raising goroutine, for a service that reacts to a signal without a
// stage of its own (Haboob's page cache shrinking on SignalMemory): f
// must be quick and must not block. The returned function cancels the
// subscription.
func (m *Manager) SubscribeFunc(signal string, f func(sink.Event)) (unsubscribe func()) {
	return m.subscribe(&subscription{signal: signal, f: f})
}

func (m *Manager) subscribe(sub *subscription) (unsubscribe func()) {
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
	var targets []*subscription
	for _, sub := range b.subs {
		if sub.signal == signal {
			targets = append(targets, sub)
		}
	}
	b.mu.Unlock()
	var errs []error
	for _, sub := range targets {
		if sub.f != nil {
			sub.f(ev)
			continue
		}
		if err := sub.s.Enqueue(ev); err != nil {
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
	interval := b.ctrl.Config().Interval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-closed:
			return
		case now := <-t.C:
			b.s.batchSize.Store(int32(b.ctrl.Observe(now, b.s.handled())))
			if iv := b.ctrl.Config().Interval; iv != interval { // a Reload changed it
				interval = iv
				t.Reset(iv)
			}
		}
	}
}

// ---- services configured by the file ----

// Service is a manager-wide service that another package builds from a
// configuration's global section, such as the profiler and its dashboard.
// A manager made by Load or Parse builds the services whose packages are
// linked in: Start starts them after the stages (a service that fails to
// start is logged, not fatal), Shutdown shuts them down after the stages
// have drained, so their last look holds the final counts.
type Service interface {
	Start(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

// ServiceBuilder builds a service for a manager made from a configuration
// (see Manager.Config). It returns a nil Service when the configuration
// leaves the service off.
type ServiceBuilder func(m *Manager) (Service, error)

// serviceRegistry holds the builders registered from init functions, in
// registration order.
var serviceRegistry = struct {
	sync.Mutex
	names    []string
	builders map[string]ServiceBuilder
}{builders: map[string]ServiceBuilder{}}

// RegisterService makes Load and Parse build a service named name (the
// `global.<name>` section it reads) for every manager they make. Stage
// cannot import the packages that own these services (they import stage):
// they register from init, as database/sql drivers do, so an application
// that links the package in (import _ ".../profiler") gets the service its
// file configures without wiring it by hand. It panics on a nil builder or
// a name registered twice.
func RegisterService(name string, build ServiceBuilder) {
	if build == nil {
		panic("stage: RegisterService: nil builder for " + name)
	}
	serviceRegistry.Lock()
	defer serviceRegistry.Unlock()
	if _, dup := serviceRegistry.builders[name]; dup {
		panic("stage: RegisterService called twice for " + name)
	}
	serviceRegistry.names = append(serviceRegistry.names, name)
	serviceRegistry.builders[name] = build
}

// namedService is a service a manager built, by name.
type namedService struct {
	name    string
	svc     Service
	started bool
}

// Service returns the service named name that Load or Parse built for m
// (for the profiler: a *profiler.Profiler), if the file switched it on.
func (m *Manager) Service(name string) (Service, bool) {
	for _, s := range m.services {
		if s.name == name {
			return s.svc, true
		}
	}
	return nil, false
}

// DefaultShutdownBound bounds a shutdown when the configuration does not
// (global.shutdown).
const DefaultShutdownBound = 10 * time.Second

// ShutdownBound is the configuration's bound on a graceful shutdown
// (global.shutdown), DefaultShutdownBound when it gives none or m was not
// made from a configuration.
func (m *Manager) ShutdownBound() time.Duration {
	if cfg := m.config.Load(); cfg != nil && cfg.Global.Shutdown > 0 {
		return cfg.Global.Shutdown
	}
	return DefaultShutdownBound
}

// newLoaded builds the manager of Load and Parse: the stages, then the
// services the file configures; its Shutdown is bounded by the file's
// global.shutdown.
func newLoaded(cfg *Config, r *Registry, opts []Options, parseErr error) (*Manager, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[len(opts)-1]
	}
	m, err := newFromConfig(cfg, r, o, parseErr)
	if err != nil {
		return nil, err
	}
	m.bounded = true
	serviceRegistry.Lock()
	names := slices.Clone(serviceRegistry.names)
	builders := maps.Clone(serviceRegistry.builders)
	serviceRegistry.Unlock()
	for _, name := range names {
		svc, err := builders[name](m)
		if err != nil {
			return nil, fmt.Errorf("stage: service %s: %w", name, err)
		}
		if svc != nil {
			m.services = append(m.services, &namedService{name: name, svc: svc})
		}
	}
	return m, nil
}

// startServices starts the services after the stages.
func (m *Manager) startServices(ctx context.Context) {
	for _, s := range m.services {
		if err := s.svc.Start(ctx); err != nil {
			m.log.Error("service not started", "service", s.name, "err", err)
			continue
		}
		s.started = true
	}
}

// stopServices shuts the started services down, last started first.
func (m *Manager) stopServices(ctx context.Context) error {
	var errs []error
	for i := len(m.services) - 1; i >= 0; i-- {
		if s := m.services[i]; s.started {
			if err := s.svc.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("service %s: %w", s.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Run starts m, waits until ctx ends or m stops by itself (a root
// supervisor gave up), then shuts it down within ShutdownBound, as the
// bundled commands do. Cancelling ctx starts a graceful shutdown; it does
// not abandon the stages as cancelling Start's context does. It returns
// the start or shutdown error, or Err after a stop by itself.
func (m *Manager) Run(ctx context.Context) error {
	if err := m.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-m.Done():
		return m.Err()
	}
	sctx, cancel := context.WithTimeout(context.Background(), m.ShutdownBound())
	defer cancel()
	return m.Shutdown(sctx)
}
