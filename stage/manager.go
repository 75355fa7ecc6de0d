package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/threadpool"
)

// Errors returned by Manager methods.
var (
	ErrStageExists   = errors.New("stage: stage already exists")
	ErrManagerClosed = errors.New("stage: manager is shut down")
	ErrStarted       = errors.New("stage: manager already started")
	ErrInit          = errors.New("stage: handler init failed")
	ErrNotStopped    = errors.New("stage: stages did not stop")
	// ErrEventsDiscarded: a destroyed stage held events that no handler
	// will ever see (it never ran, or it did not drain in time); they are
	// counted in the stage's Removed statistic.
	ErrEventsDiscarded = errors.New("stage: queued events discarded")
	// ErrNotReady: the manager is not serving (see Ready).
	ErrNotReady = errors.New("stage: manager not ready")
)

// Options configure a Manager. The zero value is usable.
type Options struct {
	// Logger receives the runtime's logs (nil: discard).
	Logger *slog.Logger
	// Registry resolves handler names (nil: DefaultRegistry).
	Registry *Registry
	// Metrics is the manager's metrics registry (nil: a new one; never the
	// go-metrics global default).
	Metrics metrics.Registry
	// ThreadManager selects per-stage pools (default) or one shared pool.
	ThreadManager ThreadManagerConfig
	// OnFailure, if set, is called for every failed batch (after it is
	// counted and logged). It must not block. Manager.Monitor delivers the
	// same failures as events, per stage.
	OnFailure func(Failure)
	// Now is the supervisors' clock for restart intensity windows and
	// the dispatch regulators' (queue.dispatch) (nil: time.Now).
	Now func() time.Time
	// After is the supervisors' timer for restart backoff, and the one
	// paced batches wait on (queue.dispatch): a channel that delivers once
	// d has passed (nil: a time.Timer). Tests pass a fake one beside Now.
	After func(d time.Duration) <-chan time.Time
	// Rand is the supervisors' random source for the jitter of crash-loop
	// backoffs (nil: one seeded from the clock). Only the manager's
	// supervisor goroutine uses it: give each manager its own. Tests pass
	// a seeded one, such as rand.New(rand.NewPCG(1, 2)).
	Rand *rand.Rand
}

type managerState int32

const (
	stateNew managerState = iota
	stateRunning
	stateStopping
	stateStopped
)

// Manager owns a graph of stages: it creates, starts, looks up, destroys and
// shuts them down, and provides timers and signals.
//
// Who owns what: the fields from opts to bounded are set by NewManager
// (and by Load or Parse before they hand the manager out) and never
// change, but for config, which Reload replaces (under reloading). mu
// guards the stage table and the lifecycle state; it is held only to read
// or change them, never across a call into a stage's queue, thread pool,
// handler or the supervisor. The atomics are read on hot paths. timers,
// signals, remotes, sup and stop each own their state behind their own
// lock or goroutine (sup: see supervise.go).
type Manager struct {
	opts       Options
	log        *slog.Logger
	registry   *Registry
	metrics    metrics.Registry
	shared     *threadpool.SharedPool
	predShared *enqueuepred.Shared // group rates of the stages' predicates
	// config is the configuration the manager was built from, replaced
	// by each Reload that applies.
	config atomic.Pointer[Config]
	// reloading serializes Reload (reload.go).
	reloading sync.Mutex
	// services are those Load or Parse built (services.go); bounded: a
	// manager made by them bounds Shutdown by the file's global.shutdown.
	services []*namedService
	bounded  bool

	mu     sync.RWMutex
	stages map[string]*Stage
	order  []*Stage
	state  managerState
	edges  map[[2]string]*atomic.Uint64
	sinks  map[[2]string]*stageSink // sinkFrom's, by (from, to)
	// runCtx and cancel are set by Start under mu, before any stage
	// launches; runCtx ends when Start's context does (the stages are
	// then abandoned: see abandon) or Shutdown is done with them.
	runCtx context.Context
	cancel context.CancelFunc

	// stopping: outside producers are refused (stageSink); set by
	// Shutdown, abandon and closeIntake, read by every outside enqueue.
	stopping        atomic.Bool
	failures        atomic.Uint64
	monitorRejected atomic.Uint64

	bg sync.WaitGroup // batching controllers and other manager goroutines

	timers  timerSet
	signals signalBus
	sup     supervision
	stop    stopped     // Done and Err
	remotes remoteSinks // stages hosted on other nodes (cluster.go)
}

// stopped is whether, and why, the manager stopped (Done, Err). Its one
// lock guards cause and err and orders them with closing done.
type stopped struct {
	done  chan struct{} // closed by finish, once
	mu    sync.Mutex
	cause error // why the manager stopped itself (a root supervisor gave up)
	err   error // Err's answer, set when done is closed
}

// setCause records why the manager stops itself; the first cause stays.
func (st *stopped) setCause(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cause == nil {
		st.cause = err
	}
}

// reason returns the cause setCause recorded, if any.
func (st *stopped) reason() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.cause
}

// finish records the final error, joined with the cause, and closes done;
// only its first call counts.
func (st *stopped) finish(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	select {
	case <-st.done:
		return
	default:
	}
	st.err = errors.Join(st.cause, err)
	close(st.done)
}

// result returns the final error once done is closed, else nil.
func (st *stopped) result() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	select {
	case <-st.done:
		return st.err
	default:
		return nil
	}
}

// Done returns a channel closed when the manager has stopped: after
// Shutdown, or at the end of the shutdown a root supervisor started when it
// gave up (bounded by ShutdownBound; closing Done is the last thing that
// shutdown's goroutine does). Commands wait on it beside their signals.
func (m *Manager) Done() <-chan struct{} { return m.stop.done }

// Err returns why the manager stopped, once Done is closed: nil after a
// clean Shutdown, an error wrapping ErrGaveUp if a root supervisor gave up
// (joined with any shutdown error), or the error Shutdown or Start
// returned.
func (m *Manager) Err() error { return m.stop.result() }

// Ready reports whether the manager is serving: nil while it runs, else
// an error wrapping ErrNotReady that says why: not started yet, draining
// (Shutdown has begun), stopped, or stopping because a root supervisor
// gave up (then it also wraps ErrGaveUp and the supervisor's cause). It
// is the answer of a readiness probe (the profiler's /readyz); it never
// blocks.
func (m *Manager) Ready() error {
	if cause := m.stop.reason(); cause != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, cause)
	}
	m.mu.RLock()
	st := m.state
	m.mu.RUnlock()
	switch st {
	case stateNew:
		return fmt.Errorf("%w: not started", ErrNotReady)
	case stateStopping:
		return fmt.Errorf("%w: draining", ErrNotReady)
	case stateStopped:
		return fmt.Errorf("%w: stopped", ErrNotReady)
	}
	return nil
}

// finish records the final error and closes Done, once.
func (m *Manager) finish(err error) { m.stop.finish(err) }

// terminationReason is what Shutdown tells monitors.
func (m *Manager) terminationReason() (TerminationReason, error) {
	if cause := m.stop.reason(); cause != nil {
		return ReasonGaveUp, cause
	}
	return ReasonShutdown, nil
}

// NewManager returns a manager with no stages, not started.
func NewManager(o Options) *Manager {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = DefaultRegistry
	}
	if o.Metrics == nil {
		o.Metrics = metrics.NewRegistry()
	}
	m := &Manager{
		opts:     o,
		log:      o.Logger,
		registry: o.Registry,
		metrics:  o.Metrics,
		stages:   map[string]*Stage{},
		edges:    map[[2]string]*atomic.Uint64{},
		sinks:    map[[2]string]*stageSink{},

		predShared: enqueuepred.NewShared(),
		stop:       stopped{done: make(chan struct{})},
	}
	if o.ThreadManager.Type == "shared" {
		m.shared = threadpool.NewSharedPool(threadpool.SharedConfig{Threads: o.ThreadManager.Threads, Logger: o.Logger})
	}
	m.timers.init(m)
	m.sup.init(m)
	return m
}

// Logger returns the manager's logger.
func (m *Manager) Logger() *slog.Logger { return m.log }

// Metrics returns the manager's metrics registry.
func (m *Manager) Metrics() metrics.Registry { return m.metrics }

// Registry returns the handler registry.
func (m *Manager) Registry() *Registry { return m.registry }

// Config returns the configuration the manager was built from, or nil.
// After a Reload it is the reloaded one.
func (m *Manager) Config() *Config { return m.config.Load() }

// Failures returns the number of failed batches across all stages.
func (m *Manager) Failures() uint64 { return m.failures.Load() }

func (m *Manager) runContext() context.Context {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.state != stateRunning && m.state != stateStopping {
		return nil
	}
	return m.runCtx
}

// Stage returns the named stage.
func (m *Manager) Stage(name string) (*Stage, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.stages[name]
	return s, ok
}

// Stages returns the stages in creation order.
func (m *Manager) Stages() []*Stage {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]*Stage(nil), m.order...)
}

// CreateStage adds a stage running h. Before Start, the handler's Init runs
// at Start; afterwards, at once. Zero fields of cfg take defaults. Other
// goroutines see the stage (Stage, Stages) only once it is fully built, and
// its handler gets no batch before its Init has returned; DestroyStage and
// Shutdown wait for a creation under way.
func (m *Manager) CreateStage(name string, h Handler, cfg StageConfig) (*Stage, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty stage name", ErrInvalidConfig)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: stage %q: nil handler", ErrInvalidConfig, name)
	}
	if cfg.path == "" {
		cfg.path = "stages." + name
		if err := cfg.validateGo(); err != nil {
			return nil, fmt.Errorf("stage %q: %w", name, err)
		}
	}
	if cfg.Supervisor != nil && cfg.Factory == nil {
		return nil, fmt.Errorf("%w: stage %q: %w", ErrInvalidConfig, name, errNoFactory)
	}
	s := &Stage{name: name, mgr: m, cfg: cfg}
	s.cur.Store(newInstance(h, 1))
	_, s.single = h.(SingleThreaded)
	s.queue = newStageQueue(sink.NewNamedQueue(name, cfg.Queue.Threshold))
	if s.cur.Load().waits != nil {
		s.queue.StampAll() // the handler is told every event's queue wait
	}
	s.queue.SetMaxAge(cfg.Queue.MaxTime)
	s.pacer = newPacer(cfg.Queue, m.opts.Now)
	if s.pacer != nil {
		s.burst = max(cfg.Queue.Burst, 1)
	}
	s.external = &stageSink{st: s, outside: true, edge: m.edgeCounter("", name)}
	sched, err := buildScheduler(cfg.Scheduler, cfg.Ordering)
	if err != nil {
		return nil, fmt.Errorf("stage %q: %w", name, err)
	}
	if sched != nil {
		if err := s.queue.SetScheduler(sched); err != nil {
			return nil, err
		}
		_, s.keyed = sched.(sink.Releaser)
	}

	bc := cfg.Batching.batchingConfig()
	if bc.Enabled {
		s.batcher = newBatcher(s, bc)
	} else {
		max := bc.Max
		if max <= 0 {
			max = 1000
		}
		s.batchSize.Store(int32(max))
	}

	// Everything others can reach through the stage is built before it is
	// published: lookups, Stats (the profiler) and the thread managers must
	// never see a half-built stage.
	pred, err := m.buildPredicate(s)
	if err != nil {
		return nil, err
	}
	if pred != nil {
		s.queue.SetPredicate(pred)
	}
	if m.shared != nil {
		// The shared pool serves a queue as soon as it has it: hold the
		// queue back until launch, after the handler's Init.
		s.queue.Pause()
		s.runner = m.shared.Add(runtimeView{s}, cfg.ThreadPool.Weight, s.single)
	} else {
		s.pool = threadpool.NewPool(runtimeView{s}, threadpool.Config{
			Min: cfg.ThreadPool.Min, Max: cfg.ThreadPool.Max, Initial: cfg.ThreadPool.Initial,
			SingleThreaded: s.single, Controller: cfg.ThreadPool.Controller,
			Logger: m.log,
		})
		s.runner = s.pool
		s.bindPool(pred)
	}
	s.metrics = newStageMetrics(m.metrics, s)
	s.ctx = &Context{mgr: m, stage: s, args: s.cfg.Args, path: cfg.path + ".args", file: cfg.file,
		log: m.log.With("stage", name)}
	s.created = make(chan struct{})
	defer close(s.created)
	abandon := func() {
		s.queue.Close() // a shared pool drops a closed, empty queue
		s.metrics.unregister()
	}

	m.mu.Lock()
	switch {
	case m.state == stateStopping || m.state == stateStopped:
		m.mu.Unlock()
		abandon()
		return nil, ErrManagerClosed
	case m.stages[name] != nil:
		m.mu.Unlock()
		abandon()
		return nil, fmt.Errorf("%w: %q", ErrStageExists, name)
	}
	m.stages[name] = s
	m.order = append(m.order, s)
	running := m.state == stateRunning
	m.mu.Unlock()
	s.metrics.publish()
	m.applyPressure(s) // a stage created while memory is high starts under pressure

	if cfg.Supervisor != nil {
		if err := m.sup.addOwn(s, *cfg.Supervisor); err != nil {
			m.forget(s)
			abandon()
			return nil, err
		}
	}

	if running {
		if err := m.initStage(s); err != nil {
			m.sup.removeStage(s)
			m.forget(s)
			abandon()
			return nil, err
		}
		m.launch(s)
	}
	return s, nil
}

// waitCreated waits until CreateStage has finished with s (its Init has run
// and its goroutines are started, on a running manager), or ctx ends.
func (s *Stage) waitCreated(ctx context.Context) error {
	select {
	case <-s.created:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// forget removes s from the manager's tables.
func (m *Manager) forget(s *Stage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(s)
}

func (m *Manager) forgetLocked(s *Stage) {
	if m.stages[s.name] == s {
		delete(m.stages, s.name)
	}
	for i, o := range m.order {
		if o == s {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
}

func (m *Manager) initStage(s *Stage) (err error) {
	in, ok := s.Handler().(Initializer)
	if !ok {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: stage %q: %w", ErrInit, s.name, &PanicError{Value: r})
		}
	}()
	if err := in.Init(s.ctx); err != nil {
		return fmt.Errorf("%w: stage %q: %w", ErrInit, s.name, err)
	}
	return nil
}

// launch starts a stage's goroutines.
func (m *Manager) launch(s *Stage) {
	ctx := m.runCtx
	if ctx.Err() != nil {
		// Start's context ended (abandon may have looked at the stages
		// before s was among them), or Shutdown is past the stages.
		m.abandonStage(s)
	}
	if s.pool != nil {
		s.pool.Start(ctx)
	} else {
		s.queue.Resume() // the pause CreateStage took for the shared pool
	}
	if s.batcher != nil {
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			s.batcher.run(ctx, s.queue.Closed())
		}()
	}
	if p := s.queue.Predicate(); p != nil {
		s.startPredicate(ctx, p)
	}
}

// Start initializes every stage created so far (in creation order), starts
// their goroutines and raises the StagesInitialized signal. If an Init
// fails, the stages already initialized are destroyed and the error is
// returned. Cancelling ctx stops every stage at once: intake closes (later
// enqueues fail with ErrClosed) and queued events are discarded, counted in
// the queues' Removed statistics and logged; use Shutdown for a graceful
// stop.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.state != stateNew {
		m.mu.Unlock()
		if m.state == stateRunning {
			return ErrStarted
		}
		return ErrManagerClosed
	}
	m.runCtx, m.cancel = context.WithCancel(ctx)
	context.AfterFunc(m.runCtx, m.abandon)
	m.state = stateRunning
	stages := append([]*Stage(nil), m.order...)
	m.mu.Unlock()

	for _, s := range stages {
		<-s.created // a concurrent CreateStage has published s but not returned
	}
	stages = slices.DeleteFunc(stages, func(s *Stage) bool { // its creation failed
		o, ok := m.Stage(s.name)
		return !ok || o != s
	})
	for i, s := range stages {
		if err := m.initStage(s); err != nil {
			// Not logged here: Start returns the error, and its caller
			// reports it (once).
			for _, done := range stages[:i] {
				if d, ok := done.Handler().(Destroyer); ok {
					_ = d.Destroy()
				}
			}
			m.mu.Lock()
			m.state = stateStopped
			m.mu.Unlock()
			m.cancel()
			m.closeIntake()
			m.finish(err)
			return err
		}
	}
	if m.shared != nil {
		m.shared.Start(m.runCtx)
	}
	m.sup.start(m.runCtx)
	for _, s := range stages {
		m.launch(s)
	}
	names := make([]string, len(stages))
	for i, s := range stages {
		names[i] = s.name
	}
	m.raiseLogged(SignalStagesInitialized, StagesInitialized{Stages: names})
	m.log.Info("stages started", "count", len(stages))
	m.startServices(m.runCtx)
	return nil
}

// DestroyStage stops intake on the named stage (later enqueues get
// ErrClosed), lets its goroutines handle what is queued, runs the handler's
// Destroy and removes the stage. The stage leaves its supervisor, and its
// monitors get StageTerminated with ReasonDestroyed. On a stage still being
// created it first waits for CreateStage to finish, so a handler's Init
// must not destroy its own stage (return an error instead). The handler is
// destroyed once, also when Shutdown or a supervisor restart runs at the
// same time. DestroyStage waits as long as the stage takes to drain; see
// DestroyStageContext to bound the wait.
func (m *Manager) DestroyStage(name string) error {
	return m.DestroyStageContext(context.Background(), name)
}

// DestroyStageContext is DestroyStage with a bound on the wait for the
// stage to drain. If ctx ends first, the events still queued are
// discarded and the error wraps ErrNotStopped and ErrEventsDiscarded; a
// handler still running is not destroyed under its feet. On a manager
// that was never started the queued events are discarded too (nobody
// would ever handle them), and the error wraps ErrEventsDiscarded. A
// supervisor restart of the stage stuck in a handler's Destroy or Init is
// waited for until ctx ends too: the error then wraps ErrNotStopped and
// ctx.Err() and names the step the restart is in, the stage is gone all
// the same, and its last handler is destroyed when the hung call returns.
func (m *Manager) DestroyStageContext(ctx context.Context, name string) error {
	s, ok := m.Stage(name)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoStage, name)
	}
	// A stage still being created has its Init running and its goroutines
	// not yet started: let CreateStage finish first.
	if err := s.waitCreated(ctx); err != nil {
		return fmt.Errorf("stage: destroy %q: still being created: %w", name, err)
	}
	m.mu.Lock()
	if m.stages[name] != s { // destroyed meanwhile, or its creation failed
		m.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNoStage, name)
	}
	m.forgetLocked(s)
	running := m.state == stateRunning || m.state == stateStopping
	m.mu.Unlock()
	m.sup.removeStage(s)
	s.queue.Close()
	var err error
	destroy := running
	if running {
		if werr := s.runner.Wait(ctx); werr != nil {
			lost := len(s.queue.Discard())
			// A batch still in flight keeps its handler alive.
			destroy = s.queue.InService() == 0
			err = fmt.Errorf("stage: destroy %q: %w (%d queued events lost: %w): %w", name, ErrNotStopped, lost, ErrEventsDiscarded, werr)
		}
	} else if lost := len(s.queue.Discard()); lost > 0 {
		err = fmt.Errorf("stage: destroy %q before start: %d queued events lost: %w", name, lost, ErrEventsDiscarded)
	}
	s.stopPredicate()
	err = errors.Join(err, m.endStages(ctx, "destroy", []*Stage{s}, destroy))
	s.metrics.unregister()
	m.signals.dropStage(s)
	m.log.Info("stage destroyed", "stage", name)
	m.notify(s, StageTerminated{Stage: name, Reason: ReasonDestroyed, Time: time.Now()}, true)
	return err
}

func (m *Manager) destroyHandler(s *Stage, d Destroyer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("stage %q: destroy: %w", s.name, &PanicError{Value: r})
		}
	}()
	if err := d.Destroy(); err != nil {
		return fmt.Errorf("stage %q: destroy: %w", s.name, err)
	}
	return nil
}

// Shutdown stops the manager gracefully, like http.Server.Shutdown: it
// raises ShutdownStarted, refuses events from outside the stages, cancels
// pending timers, lets the stages drain every queued event (stages may
// still enqueue on each other), then closes the queues, waits for the
// goroutines and runs the handlers' Destroy in reverse creation order. If
// ctx ends first, the events still queued are discarded (their predicates
// get them back as cancelled) and reported as lost, the stages that did not
// stop are named in the error, and a stage whose handler is still running
// is not destroyed. A supervisor restart stuck in a handler's Destroy or
// Init is waited for until ctx ends too: the error then names it, and the
// stages it holds are left to it (it destroys the handler it made when
// the hung call returns, and logs that).
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	switch m.state {
	case stateNew:
		m.state = stateStopped
		m.mu.Unlock()
		m.closeIntake()
		m.finish(nil)
		return nil
	case stateStopping, stateStopped:
		m.mu.Unlock()
		return ErrManagerClosed
	}
	m.state = stateStopping
	m.mu.Unlock()
	err := m.shutdown(ctx)
	m.finish(err)
	return err
}

// shutdown is Shutdown once the manager is stopping (the caller moved it
// from running): everything but closing Done, which is the caller's.
func (m *Manager) shutdown(ctx context.Context) error {
	if m.bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.ShutdownBound())
		defer cancel()
	}

	// Stages being created on the running manager finish their Init and
	// start before the drain, so that they drain and stop like the others.
	for _, s := range m.Stages() {
		if err := s.waitCreated(ctx); err != nil {
			m.log.Warn("shutdown: stage still being created", "stage", s.name, "err", err)
			break
		}
	}
	// ShutdownStarted goes out before intake stops: subscribers that are
	// stages' own sinks must still get it.
	m.raiseLogged(SignalShutdownStarted, ShutdownStarted{})
	m.stopping.Store(true)
	if n := m.timers.stopAll(); n > 0 {
		m.log.Warn("shutdown cancelled pending timer events", "count", n)
	}
	var errs []error
	if err := m.quiesce(ctx); err != nil {
		errs = append(errs, err)
	}
	// No more restarts; a restart already in a handler's Destroy or Init
	// goes on, and ends its stages for endStages below.
	m.sup.stop()
	stages := m.Stages()
	// Monitors hear of the end before the queues close, so that monitoring
	// stages still get the news.
	reason, cause := m.terminationReason()
	for _, s := range stages {
		m.notify(s, StageTerminated{Stage: s.name, Reason: reason, Err: cause, Time: time.Now()}, true)
	}
	for _, s := range stages {
		s.queue.Close()
	}
	var stuck []string
	for _, s := range stages {
		if err := s.runner.Wait(ctx); err != nil {
			stuck = append(stuck, s.name)
		}
	}
	m.cancel() // stops controllers, predicate loops and anything stuck
	// running names the stages that may still be inside their handler:
	// they are not destroyed under its feet.
	running := map[*Stage]bool{}
	if len(stuck) > 0 {
		lost := 0
		for _, s := range stages {
			lost += len(s.queue.Discard())
		}
		// The queues are closed and empty: a stage with no batch in
		// flight now will start none.
		for _, s := range stages {
			if s.queue.InService() != 0 {
				running[s] = true
			}
		}
		errs = append(errs, fmt.Errorf("%w: %s (%d queued events lost): %w", ErrNotStopped, strings.Join(stuck, ", "), lost, ctx.Err()))
	}
	if m.shared != nil {
		if err := m.shared.Shutdown(ctx); err != nil && len(stuck) == 0 {
			errs = append(errs, fmt.Errorf("%w: shared thread pool: %w", ErrNotStopped, err))
		}
	}
	m.bg.Wait()
	var ending []*Stage // in reverse creation order
	for i := len(stages) - 1; i >= 0; i-- {
		s := stages[i]
		s.stopPredicate()
		if running[s] {
			m.log.Warn("stage not destroyed: its handler is still running", "stage", s.name)
			continue
		}
		ending = append(ending, s)
	}
	if err := m.endStages(ctx, "shutdown", ending, true); err != nil {
		errs = append(errs, err)
	}
	m.sup.wait(ctx)
	if err := m.stopServices(ctx); err != nil {
		errs = append(errs, err)
	}
	m.mu.Lock()
	m.state = stateStopped
	m.mu.Unlock()
	m.log.Info("manager stopped")
	return errors.Join(errs...)
}

// abandon runs when the context given to Start ends (or Shutdown cancels
// it, when it finds the queues closed and drained): the stages' goroutines
// stop at once, so the queues are closed and emptied, and what they held is
// reported instead of being left where nobody will handle it.
func (m *Manager) abandon() {
	m.mu.RLock()
	shuttingDown := m.state == stateStopping || m.state == stateStopped
	m.mu.RUnlock()
	if shuttingDown {
		return // Shutdown closes and, if it must, discards, and reports
	}
	m.stopping.Store(true)
	lost := 0
	for _, s := range m.Stages() {
		lost += m.abandonStage(s)
	}
	if lost > 0 {
		m.log.Error("stage: manager's context ended: queued events discarded", "events", lost, "err", context.Cause(m.runCtx))
	}
}

// abandonStage closes s's queue and discards its events (counted as
// Removed in its statistics); it returns how many.
func (m *Manager) abandonStage(s *Stage) int {
	s.queue.Close()
	return len(s.queue.Discard())
}

// closeIntake closes the queues of a manager that stopped without ever
// running its stages, so that enqueues fail with ErrClosed instead of
// queueing events nobody will handle.
func (m *Manager) closeIntake() {
	m.stopping.Store(true)
	for _, s := range m.Stages() {
		<-s.created
		s.queue.Close()
	}
}

// quiesce waits until no stage has queued or in-flight events and no event
// moved between two looks, or ctx ends.
func (m *Manager) quiesce(ctx context.Context) error {
	wait := 100 * time.Microsecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		v1 := m.activity()
		if m.idle() && m.activity() == v1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stage: shutdown: draining: %w", ctx.Err())
		case <-timer.C:
		}
		wait = min(2*wait, 10*time.Millisecond)
		timer.Reset(wait)
	}
}

func (m *Manager) activity() uint64 {
	var v uint64
	for _, s := range m.Stages() {
		v += s.queue.Stats().Enqueued
	}
	return v
}

func (m *Manager) idle() bool {
	for _, s := range m.Stages() {
		// Pending first: an event moving from the queue into service
		// between the two looks is then seen by one of them.
		if s.queue.Pending() != 0 || s.queue.InService() != 0 {
			return false
		}
	}
	return true
}

// eventAttr describes a failed event for the log without writing its
// payload there: an event that implements slog.LogValuer logs what its
// LogValue chooses (resolved by the handler), any other event only its
// type.
func eventAttr(e sink.Event) slog.Attr {
	if v, ok := e.(slog.LogValuer); ok {
		return slog.Any("event", v)
	}
	return slog.String("event.type", fmt.Sprintf("%T", e))
}

func (m *Manager) reportFailure(f Failure) {
	m.failures.Add(1)
	if !m.log.Enabled(context.Background(), slog.LevelError) {
		// Nothing to log: spare building the record (a stage hit by
		// rare poison events reports one every few dozen events).
		if m.opts.OnFailure != nil {
			m.opts.OnFailure(f)
		}
		return
	}
	var first sink.Event
	if len(f.Events) > 0 {
		first = f.Events[0]
	}
	attrs := []any{"stage", f.Stage, "err", f.Err, "batch", len(f.Events)}
	if len(f.Events) > 0 {
		attrs = append(attrs, eventAttr(first))
	}
	m.log.Error("stage handler failed", attrs...)
	if m.opts.OnFailure != nil {
		m.opts.OnFailure(f)
	}
}

// sinkFrom returns the sink of stage to, traced as an edge from stage from.
func (m *Manager) sinkFrom(from, to string) (sink.Sink, error) {
	key := [2]string{from, to}
	m.mu.RLock()
	k, s := m.sinks[key], m.stages[to]
	m.mu.RUnlock()
	if k != nil && k.st == s {
		return k, nil // the common case, without the write lock
	}
	if s == nil {
		if r := m.remoteFrom(from, to); r != nil {
			return r, nil // hosted on another node (cluster.go)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.stages[to]
	if !ok {
		return nil, fmt.Errorf("%w: %q (asked for by stage %q)", ErrNoStage, to, from)
	}
	if k := m.sinks[key]; k != nil && k.st == s {
		return k, nil
	}
	k = &stageSink{st: s, from: from, edge: m.edgeCounterLocked(from, to)}
	m.sinks[key] = k // a stage re-created under the name gets a new one
	return k, nil
}

// edgeCounter returns the counter of the traced edge from → to ("" for
// producers outside any stage).
func (m *Manager) edgeCounter(from, to string) *atomic.Uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.edgeCounterLocked(from, to)
}

func (m *Manager) edgeCounterLocked(from, to string) *atomic.Uint64 {
	key := [2]string{from, to}
	c := m.edges[key]
	if c == nil {
		c = new(atomic.Uint64)
		m.edges[key] = c
	}
	return c
}

// Edge is an arc of the stage graph observed at run time.
type Edge struct {
	From  string // sending stage; "" for producers outside any stage
	To    string
	Count uint64 // events enqueued along the edge
}

// Edges returns the stage graph as traced from real enqueues: one edge per
// (sender, receiver) pair that carried events, plus an edge from "" for
// events that came through a stage's own Sink (producers outside any
// stage, and timers and signals aimed at it). A monitor event counts on
// the edge from the monitored stage to the monitoring one. Every count
// only grows.
func (m *Manager) Edges() []Edge {
	m.mu.RLock()
	var out []Edge
	for k, c := range m.edges {
		if n := c.Load(); n > 0 {
			out = append(out, Edge{From: k[0], To: k[1], Count: n})
		}
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].From != out[j].From {
			return out[i].From < out[j].From
		}
		return out[i].To < out[j].To
	})
	return out
}
