package threadpool

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Stage is what a thread manager runs: a queue to take batches from and a
// function that handles one batch.
type Stage interface {
	Name() string
	Queue() *sink.Queue
	// BatchSize is the current batching factor (≥ 1).
	BatchSize() int
	// RunBatch handles one batch. It must not panic: the stage recovers its
	// handler's failures. stamps are the events' enqueue stamps (see
	// sink.Queue.Dequeue); scratch, as long as events, is the runtime's to
	// keep a copy of the batch in. All three are reused after it returns.
	// The thread manager then reports the events finished to the queue
	// (sink.Queue.Finish), so the queue knows what is in service.
	RunBatch(events, scratch []sink.Event, stamps []int64)
}

// Runner serves one stage's queue with goroutines.
type Runner interface {
	// Size is the number of goroutines serving the stage now.
	Size() int
	// Processed is the number of events handled so far.
	Processed() uint64
	// Wait blocks until the stage's queue is closed and drained and its
	// goroutines have finished, or ctx ends.
	Wait(ctx context.Context) error
}

// Config configures a per-stage Pool. Zero values are defaults: 1 to 20
// workers, sized by the Controller with thrashing detection. A pool whose
// Max exceeds its Min runs its controller unless Controller.Disabled is
// set; Max == Min pins the size.
type Config struct {
	Min     int // fewest workers (0 → 1)
	Max     int // most workers (0 → 20)
	Initial int // workers at start (0 → Min)
	// SingleThreaded pins the pool to exactly one worker.
	SingleThreaded bool
	Controller     ControllerConfig
	Logger         *slog.Logger
	// Clock drives the controller's ticks (and so the idle times)
	// (nil: the real clock). Tests pass a fake one.
	Clock Clock
}

// Clock is the time source of a Pool's controller.
type Clock interface {
	Now() time.Time
	// NewTicker returns a channel delivering a tick every d, and a
	// function that stops it.
	NewTicker(d time.Duration) (ticks <-chan time.Time, stop func())
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// Defaults from the SEDA thesis and Sandstorm.
const (
	DefaultMin = 1
	DefaultMax = 20
)

func (c Config) withDefaults() Config {
	if c.Min <= 0 {
		c.Min = DefaultMin
	}
	if c.Max <= 0 {
		c.Max = DefaultMax
	}
	if c.Max < c.Min {
		c.Max = c.Min
	}
	if c.SingleThreaded {
		c.Min, c.Max, c.Initial = 1, 1, 1
		c.Controller.Enabled = false
	}
	if c.Max > c.Min && !c.Controller.Enabled && !c.Controller.Disabled {
		// A pool allowed to grow grows under load, and gives back the
		// goroutines that add no throughput.
		c.Controller.Enabled, c.Controller.AutoMaxDetect = true, true
	}
	if c.Controller.Disabled {
		c.Controller.Enabled = false
	}
	if c.Initial <= 0 {
		c.Initial = c.Min
	}
	c.Initial = clamp(c.Initial, c.Min, c.Max)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	return c
}

// Pool is the default thread manager: a pool of goroutines dedicated to one
// stage, sized by a Controller. A SEDA controller on the real clock rests
// while its pool is at its minimum size with fewer events queued than its
// QueueThreshold (no tick could change anything then): idle stages keep no
// timers. It resumes ticking when an enqueue that finds every worker busy
// brings the queue to the threshold; its first tick comes one Interval
// later, as it would have with a free-running ticker at worst.
type Pool struct {
	st    Stage
	cfg   Config
	ctrl  *Controller // the sizer, or (beside other) measuring only
	other Sizer       // the sizer if not ctrl
	locks LockMeter
	meas  measurement // owned by the control goroutine

	size   atomic.Int32 // live workers
	target atomic.Int32 // desired workers
	// limits packs the current Min (high half) and Max (low half):
	// cfg's, until Retune changes them (retune.go).
	limits atomic.Uint64
	// pinned is the size of a pool without a controller: cfg.Initial,
	// until Retune moves the bounds past it.
	pinned atomic.Int32
	// resizeMu serializes resize: the control goroutine and Retune.
	resizeMu sync.Mutex
	// retuned wakes the control goroutine to read its configuration
	// again (Retune).
	retuned chan struct{}
	// lastTick is the UnixNano of the controller's latest tick, once
	// applied.
	lastTick atomic.Int64
	// dormant: the controller sleeps until an event is queued (control).
	dormant atomic.Bool
	// parked holds the parked-worker counts of the ticks within the idle
	// time (and the one before): owned by the control goroutine.
	parked []idleSample

	mu        sync.Mutex
	gen       atomic.Uint64 // bumped to make every idle worker look again
	cancelled atomic.Bool   // Start's context ended
	workers   map[*worker]struct{}

	ctx     context.Context
	unhook  func() bool    // stops Start's AfterFunc on ctx
	wg      sync.WaitGroup // workers
	ctlDone chan struct{}
	stop    chan struct{}
	done    chan struct{} // closed when the last worker has exited after drain
	started atomic.Bool
}

type worker struct {
	wait *sinkrt.Waiter
}

// idleSample is the number of parked workers at a controller tick.
type idleSample struct {
	at     int64 // UnixNano
	parked int
}

var _ Runner = (*Pool)(nil)

// NewPool returns a pool for st. Call Start to run it.
func NewPool(st Stage, cfg Config) *Pool {
	cfg = cfg.withDefaults()
	if q := st.Queue(); q != nil {
		cfg.Controller.QueueThreshold = FitQueueThreshold(cfg.Controller.QueueThreshold, q.Capacity())
	}
	p := &Pool{
		st:      st,
		cfg:     cfg,
		workers: map[*worker]struct{}{},
		ctlDone: make(chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		retuned: make(chan struct{}, 1),
	}
	p.storeBounds(cfg.Min, cfg.Max)
	p.pinned.Store(int32(cfg.Initial))
	p.ctrl, p.other = newSizer(cfg)
	return p
}

// newSizer makes the pool's SEDA controller and, if the configuration
// asks for another sizer, that one (the controller then only measures the
// throughput).
func newSizer(cfg Config) (*Controller, Sizer) {
	cc := cfg.Controller
	if cc.NewSizer == nil && (cc.Type == "" || cc.Type == TypeSEDA) {
		return NewController(cc, cfg.Min, cfg.Max, nil), nil
	}
	meter := cc
	meter.Enabled = false
	c := NewController(meter, cfg.Min, cfg.Max, nil)
	if cc.NewSizer != nil {
		s := cc.NewSizer(cfg.Min, cfg.Max)
		if s == nil {
			panic("threadpool: ControllerConfig.NewSizer returned nil")
		}
		return c, s
	}
	if err := cc.Validate(); err != nil {
		panic(err)
	}
	return c, NewWhirlwind(cc.Whirlwind, cfg.Min, cfg.Max)
}

// Controller returns the pool's SEDA controller (for inspection). When the
// pool runs another Sizer (ControllerConfig.Type or NewSizer), this one is
// disabled and only measures the throughput.
func (p *Pool) Controller() *Controller { return p.ctrl }

// Sizer returns the controller that sizes the pool: the Controller, a
// *Whirlwind, or the one ControllerConfig.NewSizer made. It runs only if
// the configuration enables a controller (see Config).
func (p *Pool) Sizer() Sizer {
	if p.other != nil {
		return p.other
	}
	return p.ctrl
}

// LockMeter returns the meter the stage's handlers report their lock waits
// to, for Sample.LockLatency: give it to a Mutex, or Observe waits on it.
func (p *Pool) LockMeter() *LockMeter { return &p.locks }

// Config returns the pool's configuration with defaults filled in, with
// the bounds and controller settings Retune has set since.
func (p *Pool) Config() Config {
	cfg := p.cfg
	cfg.Min, cfg.Max = p.bounds()
	cc := p.ctrl.Config()
	cc.Enabled, cc.Disabled = cfg.Controller.Enabled, cfg.Controller.Disabled
	cc.Type, cc.NewSizer = cfg.Controller.Type, cfg.Controller.NewSizer
	if w, ok := p.other.(*Whirlwind); ok {
		cc.Whirlwind = w.Config()
	}
	cfg.Controller = cc
	return cfg
}

// Size returns the number of live workers.
func (p *Pool) Size() int { return int(p.size.Load()) }

// Processed returns the number of events handled.
func (p *Pool) Processed() uint64 { return sinkrt.Of(p.st.Queue()).Finished() }

// Start launches the initial workers and, if enabled, the controller. The
// workers run until the stage's queue is closed and drained; cancelling ctx
// stops them at once, abandoning queued events.
func (p *Pool) Start(ctx context.Context) {
	if !p.started.CompareAndSwap(false, true) {
		return
	}
	p.ctx = ctx
	p.mu.Lock()
	p.unhook = context.AfterFunc(ctx, func() {
		p.cancelled.Store(true)
		p.wakeAll()
	})
	p.mu.Unlock()
	p.resizeMu.Lock()
	lo, hi := p.bounds()
	initial := clamp(int(p.pinned.Load()), lo, hi)
	p.target.Store(int32(initial))
	p.grow(initial)
	p.resizeMu.Unlock()
	if p.cfg.Controller.Enabled {
		p.meas.start(p, p.cfg.Clock.Now())
		go p.control()
	} else {
		close(p.ctlDone)
	}
}

// Wait blocks until the queue is drained and every worker has exited (or
// ctx ends), then stops the controller.
func (p *Pool) Wait(ctx context.Context) error {
	if !p.started.Load() {
		return nil
	}
	if err := waitDone(ctx, p.done); err != nil {
		return err
	}
	p.wg.Wait()
	p.stopControl()
	<-p.ctlDone
	return nil
}

// waitDone waits for done to be closed or ctx to end, and prefers done
// when both are: a runner that has finished is reported finished even to a
// caller whose deadline has passed.
func waitDone(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Pool) stopControl() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
}

func (p *Pool) grow(n int) {
	for i := 0; i < n; i++ {
		w := &worker{wait: sinkrt.NewWaiter()}
		p.mu.Lock()
		select {
		case <-p.done:
			p.mu.Unlock()
			return
		default:
		}
		p.workers[w] = struct{}{}
		p.size.Add(1)
		p.wg.Add(1)
		p.mu.Unlock()
		go p.run(w)
	}
}

// retire reports whether w should exit because the pool is above target;
// if so it has already been removed.
func (p *Pool) retire(w *worker) bool {
	for {
		s := p.size.Load()
		if s <= p.target.Load() || s <= 1 {
			return false
		}
		if p.size.CompareAndSwap(s, s-1) {
			p.mu.Lock()
			delete(p.workers, w)
			p.mu.Unlock()
			return true
		}
	}
}

// wakeAll makes every idle worker look at the pool's state again
// (retirement, cancellation, drain). Workers park on the queue alone
// (sinkrt.Queue.Park: one channel is cheaper to wait on than a select);
// wakeAll wakes every parked worker and leaves a token for one about to
// park, which passes it on when it sees a new generation; a worker that
// was busy sees the generation before it parks.
func (p *Pool) wakeAll() {
	p.gen.Add(1)
	sinkrt.Of(p.st.Queue()).WakeAll()
}

// exit removes w; the last worker out closes done and unhooks the pool
// from Start's context, which may live on (a stage destroyed at run time
// must not stay reachable from the manager's context).
func (p *Pool) exit(w *worker) {
	p.mu.Lock()
	delete(p.workers, w)
	if p.size.Add(-1) == 0 {
		select {
		case <-p.done:
		default:
			close(p.done)
			if p.unhook != nil {
				p.unhook()
			}
		}
	}
	p.mu.Unlock()
}

func (p *Pool) run(w *worker) {
	defer p.wg.Done()
	q := p.st.Queue()
	rt := sinkrt.Of(q)
	var b batchBuf
	for {
		gen := p.gen.Load()
		if p.retire(w) {
			rt.Signal() // pass the wake-up on
			return
		}
		bs := max(p.st.BatchSize(), 1)
		queued := q.Len()
		bs = p.share(bs, queued)
		lim := b.fit(bs, queued)
		if n := q.Dequeue(b.events[:lim], b.stamps[:lim]); n > 0 {
			p.runBatch(rt, b.events[:n], b.scratch[:n], b.stamps[:n])
			continue
		}
		if q.IsClosed() && q.Drained() {
			p.exit(w)
			rt.Signal()
			return
		}
		if p.cancelled.Load() {
			p.exit(w)
			rt.Signal()
			return
		}
		// Park. Close, cancellation and resizing wake parked workers
		// too. The worker receives the wake-up itself (sinkrt Enlist,
		// not Park): fewer frames to return through once resumed.
		if rt.Enlist(w.wait) {
			if h := <-w.wait.C; h.OK {
				// Handed over directly by an enqueue on the empty
				// queue. Events enqueued since join it: the batch
				// is bound when the worker runs, not when it was
				// woken.
				queued = 1 + q.Len()
				lim = b.fit(p.share(bs, queued), queued)
				b.events[0], b.stamps[0] = h.Ev, h.Stamp
				n := 1 + q.Dequeue(b.events[1:lim], b.stamps[1:lim])
				p.runBatch(rt, b.events[:n], b.scratch[:n], b.stamps[:n])
				continue
			}
		}
		if p.gen.Load() != gen {
			rt.Signal()
		}
	}
}

// share returns the most events one worker takes from queued ones, bs
// being the batching factor: its share of them, so that one slow batch
// does not hold the events the pool's other workers (or the one its
// controller may add) could run meanwhile. With w workers, of which one
// more may come while the pool is below Max under its controller, a
// worker takes ⌈queued/w⌉: a lone worker of a pool that can grow leaves
// half the queue, which keeps the backlog the controller grows the pool
// on. A pool with one worker for good (Max 1, SingleThreaded) takes
// batches of bs. A hop (one event queued) is a batch of one either way.
func (p *Pool) share(bs, queued int) int {
	if queued <= 1 || bs <= 1 {
		return bs
	}
	w := p.Size()
	if _, hi := p.bounds(); w < hi && p.cfg.Controller.Enabled {
		w++
	}
	if w <= 1 {
		return bs
	}
	return min(bs, (queued+w-1)/w)
}

// batchBuf is a worker's batch slices: the events, the runtime's copy of
// them (scratch) and their stamps. They are sized to the work seen, not
// to the batch size: a worker whose batches hold an event or two (a stage
// on a hop) touches a few cache lines of small slices, where three arrays
// of the default 1000 events were 40 KB a worker, and the first lines of
// such arrays, all aligned alike, evicted one another from the same L1
// cache sets.
type batchBuf struct {
	events, scratch []sink.Event
	stamps          []int64
}

// minBatchBuf is the smallest buffer a worker holds.
const minBatchBuf = 16

// fit readies the buffers for a batch of at most bs events from a queue
// holding about queued, and returns the batch limit: bs, or less while
// fewer events are waiting than bs. The buffers grow, by doubling at
// least, and never shrink.
func (b *batchBuf) fit(bs, queued int) int {
	if want := max(min(bs, queued), 1); want > len(b.events) {
		n := min(bs, max(want, 2*len(b.events), minBatchBuf))
		b.events, b.scratch, b.stamps = make([]sink.Event, n), make([]sink.Event, n), make([]int64, n)
	}
	return min(bs, len(b.events))
}

// runBatch runs one dequeued batch and reports it finished.
func (p *Pool) runBatch(rt sinkrt.Queue, events, scratch []sink.Event, stamps []int64) {
	p.st.RunBatch(events, scratch, stamps)
	if len(events) == 1 {
		events[0] = nil // a hop's batch: no call to memclrHasPointers
	} else {
		clear(events)
	}
	rt.Finish(len(events))
}

// idleWorkers estimates how many workers have been idle for at least d at
// now: the fewest parked at any tick within d (given a tick at least d
// old). Workers keep no idle clock of their own: parking costs them
// nothing more. A worker that woke briefly between two ticks counts as
// idle: the pool had that many workers to spare all along. Called by the
// control goroutine only.
func (p *Pool) idleWorkers(now time.Time, d time.Duration) int {
	t := now.UnixNano()
	p.parked = append(p.parked, idleSample{at: t, parked: sinkrt.Of(p.st.Queue()).Parked()})
	cut := t - int64(d)
	// Keep the latest sample at or before the cut and those after it.
	i := 0
	for i+1 < len(p.parked) && p.parked[i+1].at <= cut {
		i++
	}
	p.parked = append(p.parked[:0], p.parked[i:]...)
	if p.parked[0].at > cut {
		return 0 // not watched for d yet
	}
	n := p.parked[0].parked
	for _, s := range p.parked[1:] {
		n = min(n, s.parked)
	}
	return n
}

func (p *Pool) control() {
	defer close(p.ctlDone)
	// Only the SEDA controller on the real clock goes dormant: its ticks
	// are no-ops at the pool's minimum size with nothing queued. Other
	// sizers measure idle and queueing time at every tick, and a test's
	// fake clock expects every tick it delivers to be taken.
	_, realTime := p.cfg.Clock.(realClock)
	mayRest := realTime && p.other == nil
	rouse := make(chan struct{}, 1)
	for {
		cfg := p.ctrl.Config() // again after a Retune
		if mayRest && p.quiet(cfg) && sinkrt.Of(p.st.Queue()).NotifyBacklog(rouse, cfg.QueueThreshold) {
			// Dormant: no tick could change the pool's size until
			// more events are queued (the workers take care of the
			// few there may be). The ticker is stopped (a timer in
			// the runtime's heap makes every scheduling decision on
			// its processor read the clock) until an event has to be
			// queued because every worker is busy.
			if !p.rest(rouse) {
				return
			}
		}
		if !p.tickUntilQuiet(cfg, mayRest) {
			return
		}
	}
}

// rest waits for rouse, and reports false if the pool stops meanwhile.
func (p *Pool) rest(rouse chan struct{}) bool {
	p.dormant.Store(true)
	defer p.dormant.Store(false)
	select {
	case <-p.stop:
		return false
	case <-p.ctx.Done():
		return false
	case <-p.done:
		return false
	case <-p.retuned:
		return true // the control loop reads its configuration again
	case <-rouse:
	}
	// The intervals slept through are not measured: the next tick is a
	// new baseline, and the idle samples start over.
	p.ctrl.rebase()
	p.meas.start(p, p.cfg.Clock.Now())
	p.parked = p.parked[:0]
	return true
}

// tickUntilQuiet runs the controller once per interval. It returns true
// once the pool is quiet (if mayRest) or Retune changed the controller's
// configuration, and false when the pool is stopping.
func (p *Pool) tickUntilQuiet(cfg ControllerConfig, mayRest bool) bool {
	ticks, stop := p.cfg.Clock.NewTicker(cfg.Interval)
	defer stop()
	for {
		select {
		case <-p.stop:
			return false
		case <-p.ctx.Done():
			return false
		case <-p.done:
			return false
		case <-p.retuned:
			return true
		case now := <-ticks:
			p.tick(now, cfg.Idle)
			if mayRest && p.quiet(cfg) {
				return true
			}
		}
	}
}

// quiet reports whether the pool is at its minimum size, with no worker
// on its way in or out, and fewer events queued than would make the
// controller add a worker.
func (p *Pool) quiet(cfg ControllerConfig) bool {
	lo, _ := p.bounds()
	return int(p.target.Load()) == lo && p.Size() == lo && p.st.Queue().Len() < cfg.QueueThreshold
}

// tick samples the stage, asks the controller and resizes the pool.
func (p *Pool) tick(now time.Time, idle time.Duration) {
	s := Sample{
		Now:       now,
		QueueLen:  p.st.Queue().Len(),
		Processed: p.Processed(),
		// Workers above the target are on their way out (woken, not
		// parked): the pool's size is the target.
		Size:        min(p.Size(), int(p.target.Load())),
		IdleWorkers: p.idleWorkers(now, idle),
	}
	p.meas.sample(p, &s)
	target := p.ctrl.Tick(s)
	if p.other != nil {
		target = p.other.Tick(s)
	}
	p.resize(target)
	p.lastTick.Store(now.UnixNano()) // last: tests wait for it to see the tick applied
}

func (p *Pool) resize(target int) {
	p.resizeMu.Lock()
	defer p.resizeMu.Unlock()
	lo, hi := p.bounds()
	target = clamp(target, lo, hi)
	p.target.Store(int32(target))
	if cur := p.Size(); target > cur {
		p.cfg.Logger.Debug("threadpool: grow", "stage", p.st.Name(), "from", cur, "to", target)
		p.grow(target - cur)
	} else if target < cur {
		p.cfg.Logger.Debug("threadpool: shrink", "stage", p.st.Name(), "from", cur, "to", target)
		p.wakeAll()
	}
}
