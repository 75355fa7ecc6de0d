package stage

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/threadpool"
)

// ErrHandlerPanic is wrapped by the error recorded when a handler panics.
var ErrHandlerPanic = errors.New("stage: handler panicked")

// PanicError carries a recovered panic. It wraps ErrHandlerPanic.
type PanicError struct {
	Value any
	// Stack is the panicking goroutine's stack from the panic up (for a
	// handler's panic in HandleEvents): a function per frame, then its
	// file and line, without argument values (cheaper to capture than
	// runtime/debug.Stack: a stage hit by rare poison events pays it on
	// every one).
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("stage: handler panicked: %v", e.Value) }

// Unwrap returns ErrHandlerPanic.
func (e *PanicError) Unwrap() error { return ErrHandlerPanic }

// stackDepth bounds the frames a PanicError's Stack records.
const stackDepth = 64

// stackMemo formats the stacks of a stage's panics. It keeps the text of
// each program counter's frames, which never changes, so that a stage hit
// again and again by the same poison event pays runtime.CallersFrames
// (microseconds for a frame's file and line) only once per frame.
// Its zero value is ready; it is safe for concurrent use.
type stackMemo struct{ frames sync.Map } // uintptr → []byte

// stack formats the stack of a goroutine that is panicking, from the
// panic up; it is called from the deferred function that recovered it.
func (sm *stackMemo) stack() []byte {
	var pcs [stackDepth]uintptr
	n := runtime.Callers(3, pcs[:]) // skip Callers, stack, the deferred function
	b := make([]byte, 0, 128*n)
	for _, pc := range pcs[:n] {
		text, ok := sm.frames.Load(pc)
		if !ok {
			text, _ = sm.frames.LoadOrStore(pc, formatFrames(pc))
		}
		b = append(b, text.([]byte)...)
	}
	if n == stackDepth {
		b = append(b, "...\n"...)
	}
	return b
}

// formatFrames formats the frames of return address pc (more than one
// where calls were inlined): the function, then its file and line.
func formatFrames(pc uintptr) []byte {
	frames := runtime.CallersFrames([]uintptr{pc})
	var b []byte
	for {
		f, more := frames.Next()
		b = append(b, f.Function...)
		b = append(b, "()\n\t"...)
		b = append(b, f.File...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(f.Line), 10)
		b = append(b, '\n')
		if !more {
			return b
		}
	}
}

// EventError pins a handler's failure on one event of its batch: a handler
// returns it (as is, or several joined with errors.Join) to say that the
// event at Index, its position in the batch as the handler got it, failed
// with Err, and that it dealt with every other event of the batch. The
// runtime then reports each named event as a failure of its own; see
// Failure.
type EventError struct {
	Index int
	Err   error
}

// FailEvent returns an EventError: the event at index i of the batch
// failed with err.
func FailEvent(i int, err error) error { return &EventError{Index: i, Err: err} }

func (e *EventError) Error() string {
	return fmt.Sprintf("stage: event %d of the batch failed: %v", e.Index, e.Err)
}

// Unwrap returns Err.
func (e *EventError) Unwrap() error { return e.Err }

// Failure describes a failure of a stage's handler.
//
// When the handler named its failed events (EventError), each failed event
// is a Failure of its own: Events holds just that event, Err its error, and
// the rest of the batch was handled. Otherwise (the handler panicked, or
// returned an error that names no event or an index outside the batch) the
// batch failed as a whole: Whole is set, Events is the whole batch in the
// order it was handed out, and which of its events were handled is
// unknown. A handler that handles its batch in order and panics has
// handled the events before the panicking one, not the others. A fresh
// handler whose Init failed on a restart is a Failure without events.
type Failure struct {
	Stage  string
	Err    error
	Events []sink.Event // a copy of the failed events
	// Whole reports a batch that failed as a unit: its events may or may
	// not have been handled.
	Whole bool
	Time  time.Time
	// Instance numbers the handler that failed: 1 for the stage's first,
	// one more for each restart by its supervisor.
	Instance uint64
}

// Stats are a stage's cumulative counters.
type Stats struct {
	sink.Stats
	Events    uint64 // events whose batch has finished
	Failures  uint64 // failures reported: events named by EventError, batches that failed whole, restarted handlers whose Init failed
	Restarts  uint64 // handlers replaced by the stage's supervisor
	Linked    uint64 // events cancelled because an event of their principal failed
	Expired   uint64 // events dropped unhandled because their context had ended (ContextEvent)
	PoolSize  int    // goroutines serving the stage
	BatchSize int    // current batching factor
	QueueLen  int
}

// Stage is a running stage: a handler, its admission-controlled queue and
// the goroutines that serve it.
type Stage struct {
	name string
	mgr  *Manager
	cfg  StageConfig
	// live is the configuration Config reports once a Reload has changed
	// the stage in place (nil: cfg). What the runtime reads of cfg never
	// changes after creation; Reload applies its changes to the queue,
	// pool and batching controller (reload_stage.go).
	live atomic.Pointer[StageConfig]
	// removed is set when a Reload removes the stage: its sink's refusals
	// then say so (removedError).
	removed atomic.Bool

	queue  stageQueue
	cur    atomic.Pointer[instance] // the handler; swapped by restarts while no batch runs
	single bool
	keyed  bool           // the queue's scheduler holds events back until Release
	age    ageReport      // max_time expiries (age.go)
	pacer  *dispatchPacer // queue.dispatch (age.go); nil: none
	burst  int            // with pacer: the most events of a batch (queue.burst, ≥ 1)
	ctx    *Context

	external *stageSink
	runner   threadpool.Runner
	pool     *threadpool.Pool // nil on the shared pool

	batchSize atomic.Int32
	batcher   *batcher

	failures atomic.Uint64
	restarts atomic.Uint64
	linked   atomic.Uint64
	expired  atomic.Uint64 // events dropped because their context had ended (expire.go)
	metrics  *stageMetrics

	monitors monitors
	stacks   stackMemo // formats PanicError.Stack

	predMu     sync.Mutex
	predCancel context.CancelFunc
	predWG     sync.WaitGroup

	created chan struct{} // closed when CreateStage is done with the stage
	// ended: the stage's last handler has been handed to its end
	// (DestroyStage, Shutdown) and no supervisor makes it a new one.
	// Owned by the supervision state's owner (supervise.go), like the
	// supervision tree.
	ended bool
	// restartOn is the RestartOn of the stage's supervisor (nil:
	// unsupervised, or its root gave up); set by the supervision tree's
	// owner, read by fail to decide on its own whether to pause the queue
	// (supervise.go).
	restartOn atomic.Pointer[RestartOn]
}

// Name returns the stage's name.
func (s *Stage) Name() string { return s.name }

// Sink returns the stage's event sink for producers outside any stage.
// Handlers should use Context.Sink instead, which records the edge between
// the two stages for the profiler and keeps working while the manager drains
// at shutdown.
func (s *Stage) Sink() sink.Sink { return s.external }

// instance is one handler of a stage and its number.
type instance struct {
	h Handler
	n uint64
	// waits is h when it wants its events' queue waits (WrapWaits).
	waits waitsHandler
	// ok: a batch of h's has succeeded. Set once by handleBatch, read
	// when h fails: a handler that fails before it has handled anything
	// is in a crash loop, and its supervisor backs off.
	ok atomic.Bool
}

// newInstance returns the instance number n of a stage's handler h.
func newInstance(h Handler, n uint64) *instance {
	inst := &instance{h: h, n: n}
	inst.waits, _ = h.(waitsHandler)
	return inst
}

// handledOK records that a batch of inst's handler succeeded.
func (inst *instance) handledOK() {
	if !inst.ok.Load() { // a load only, once set: no write on the hot path
		inst.ok.Store(true)
	}
}

// Handler returns the stage's current handler (a supervisor may replace it).
func (s *Stage) Handler() Handler { return s.cur.Load().h }

func (s *Stage) instanceNumber() uint64 { return s.cur.Load().n }

// Config returns the stage's configuration (defaults applied).
// After a Reload that changed the stage it is the reloaded configuration.
func (s *Stage) Config() StageConfig {
	if c := s.live.Load(); c != nil {
		return *c
	}
	return s.cfg
}

// Manager returns the manager the stage belongs to.
func (s *Stage) Manager() *Manager { return s.mgr }

// Stats returns the stage's counters.
func (s *Stage) Stats() Stats {
	st := Stats{
		Stats:     s.queue.Stats(),
		Events:    s.handled(),
		Failures:  s.failures.Load(),
		Restarts:  s.restarts.Load(),
		Linked:    s.linked.Load(),
		Expired:   s.expired.Load(),
		BatchSize: int(s.batchSize.Load()),
		QueueLen:  s.queue.Len(),
	}
	if s.runner != nil {
		st.PoolSize = s.runner.Size()
	}
	return st
}

// handled is the number of events whose batch has finished, as counted by
// the stage's thread manager.
func (s *Stage) handled() uint64 {
	if s.runner == nil {
		return 0
	}
	return s.runner.Processed()
}

// Pool returns the stage's dedicated thread pool, or nil when it runs on the
// shared pool.
func (s *Stage) Pool() *threadpool.Pool { return s.pool }

// runtimeView is what thread managers see of a stage.
type runtimeView struct{ s *Stage }

func (v runtimeView) Name() string       { return v.s.name }
func (v runtimeView) Queue() *sink.Queue { return v.s.queue.Queue }
func (v runtimeView) BatchSize() int {
	bs := int(v.s.batchSize.Load())
	if b := v.s.burst; b > 0 {
		bs = min(bs, b) // a paced batch is at most the bucket's depth (age.go)
	}
	return bs
}
func (v runtimeView) RunBatch(events, scratch []sink.Event, stamps []int64) {
	v.s.runBatch(events, scratch, stamps)
}

// runBatch handles a batch; on a keyed stage it then releases the batch's
// keys so their next events may run.
//
// The handler owns the batch slice while it runs and may reorder or
// overwrite it, so completions (Done), failure reports and key releases
// work from a copy of the batch as it was handed out: the predicate must
// get back exactly the events it admitted.
func (s *Stage) runBatch(events, scratch []sink.Event, stamps []int64) {
	if s.queue.Sheds() { // max_time, shedding (age.go)
		if events, stamps = s.expire(events, stamps); len(events) == 0 {
			return
		}
	}
	if s.pacer != nil { // dispatch rate (age.go)
		s.runPaced(events, scratch, stamps)
		return
	}
	s.runNow(events, scratch, stamps)
}

// runNow is runBatch once the batch may go.
func (s *Stage) runNow(events, scratch []sink.Event, stamps []int64) {
	if events, stamps = s.dropExpired(events, stamps); len(events) == 0 {
		return
	}
	orig := scratch[:len(events)]
	if len(events) == 1 {
		// One event, as on a hop: a plain store, not a call to
		// typedslicecopy (and below memclrHasPointers).
		orig[0] = events[0]
	} else {
		copy(orig, events)
	}
	s.handleBatch(events, orig, stamps)
	if s.keyed {
		s.queue.Release(orig)
	}
	if len(orig) == 1 {
		orig[0] = nil
	} else {
		clear(orig)
	}
}

// handleBatch calls the handler with batch, measures, feeds completions
// back to the predicate and reports failures. orig is a copy of batch that
// the handler cannot touch; stamps are orig's enqueue times.
//
// Without a Completer predicate only batches whose first event carries a
// stamp are timed (the queue stamps a sample of events; clock reads cost
// ~30 ns each), which feeds the stage's service and queueing-time metrics.
func (s *Stage) handleBatch(batch, orig []sink.Event, stamps []int64) {
	inst := s.cur.Load()
	completes := s.queue.MayComplete()
	timed := stamps[0] != 0
	if !completes && !timed && inst.waits == nil {
		if err := invoke(inst.h, batch, &s.stacks); err != nil {
			s.fail(inst, err, orig)
		} else {
			inst.handledOK()
		}
		return
	}
	start := sink.Nanotime()
	var err error
	if inst.waits != nil {
		err = invokeWaits(inst.waits, batch, stamps, start, &s.stacks)
	} else {
		err = invoke(inst.h, batch, &s.stacks)
	}
	service := time.Duration(sink.Nanotime() - start)
	if completes {
		s.complete(orig, stamps, start, service)
	}
	if s.metrics != nil && timed {
		s.metrics.observe(start, len(orig), stamps[0], service)
	}
	if err != nil {
		s.fail(inst, err, orig)
	} else {
		inst.handledOK()
	}
}

// complete tells the predicates that admitted a batch's events (stamped
// stamps, handled from start on in service) that they have been handled.
// Each event completes on the predicate that admitted it, which may have
// been replaced since. The runtime cannot see inside a handler, so every
// event waited for the whole batch (its response time is queued+service)
// and, for the predicates that charge events their own cost
// (sink.ServiceSharer: per-principal accounting), took an equal share of
// it: service/len(batch). A batch of one event gets service either way.
func (s *Stage) complete(batch []sink.Event, stamps []int64, start int64, service time.Duration) {
	n := len(batch)
	for i, e := range batch {
		c := s.queue.CompleterAt(stamps[i])
		if c == nil {
			continue
		}
		queued := time.Duration(start - stamps[i])
		if n > 1 {
			if bc, ok := c.(sinkrt.BatchCompleter); ok {
				bc.DoneInBatch(e, queued, service, n)
				continue
			}
		}
		c.Done(e, queued, service)
	}
}

// fail contains a failed batch: its failures (one per event the handler's
// EventErrors name, else one for the whole batch) are counted, logged,
// reported to Options.OnFailure and to the stage's monitors, the queued
// events linked to the failed ones are cancelled, and the stage's
// supervisor (if any) is told once. A supervised stage's queue is paused
// before anyone hears of the failure, so that what a monitor enqueues in
// response goes to the restarted handler.
func (s *Stage) fail(inst *instance, err error, events []sink.Event) {
	now := time.Now()
	var fs []Failure
	// healthy: the handler has handled events, in an earlier batch or in
	// this one (the events its EventErrors do not name).
	healthy := inst.ok.Load()
	if ees := eventErrors(err, len(events)); ees != nil {
		healthy = healthy || len(ees) < len(events)
		fs = make([]Failure, len(ees))
		for i, ee := range ees {
			cause := ee.Err
			if cause == nil {
				cause = ee
			}
			fs[i] = Failure{Stage: s.name, Err: cause, Events: []sink.Event{events[ee.Index]}, Time: now, Instance: inst.n}
		}
	} else {
		fs = []Failure{{Stage: s.name, Err: err, Events: slices.Clone(events), Whole: true, Time: now, Instance: inst.n}}
	}
	s.failures.Add(uint64(len(fs)))
	paused := s.mgr.sup.pause(s, err)
	for _, f := range fs {
		s.mgr.reportFailure(f)
		s.mgr.notify(s, StageFailed{f}, false)
		failCalls(f)
	}
	if s.cfg.Ordering.Linked {
		s.failLinked(fs)
	}
	s.mgr.sup.report(s, inst.n, healthy, err, paused)
}

// eventErrors returns the EventErrors that make up err (one, or several
// joined), or nil if err is anything else or names an event outside a
// batch of n: then the batch failed as a whole.
func eventErrors(err error, n int) []*EventError {
	var out []*EventError
	var walk func(error) bool
	walk = func(err error) bool {
		switch e := err.(type) {
		case *EventError:
			if e == nil || e.Index < 0 || e.Index >= n {
				return false
			}
			out = append(out, e)
			return true
		case interface{ Unwrap() []error }:
			errs := e.Unwrap()
			for _, x := range errs {
				if !walk(x) {
					return false
				}
			}
			return len(errs) > 0
		}
		return false
	}
	if !walk(err) {
		return nil
	}
	return out
}

func invoke(h Handler, events []sink.Event, stacks *stackMemo) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: stacks.stack()}
		}
	}()
	return h.HandleEvents(events)
}

// invokeWaits is invoke for a handler that is told each event's queue
// wait: start minus its enqueue stamp, -1 for an event without a stamp
// (queued before the stage's queue stamped every event).
func invokeWaits(h waitsHandler, events []sink.Event, stamps []int64, start int64, stacks *stackMemo) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: stacks.stack()}
		}
	}()
	waits := make([]time.Duration, len(events))
	for i := range waits {
		waits[i] = -1
		if stamps[i] != 0 {
			waits[i] = time.Duration(start - stamps[i])
		}
	}
	return h.handleWithWaits(events, waits)
}

// startPredicate runs the background loop of every predicate of p's tree
// that has one (a Modified, also inside a composite: sink.Composite).
func (s *Stage) startPredicate(ctx context.Context, p sink.Predicate) {
	s.predMu.Lock()
	defer s.predMu.Unlock()
	if s.predCancel != nil {
		s.predCancel()
		s.predCancel = nil
	}
	if ctx == nil {
		return
	}
	var runners []interface{ Run(ctx context.Context) }
	sink.Walk(p, func(q sink.Predicate) {
		if r, ok := q.(interface{ Run(ctx context.Context) }); ok {
			runners = append(runners, r)
		}
	})
	if len(runners) == 0 {
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	s.predCancel = cancel
	for _, r := range runners {
		s.predWG.Add(1)
		go func() {
			defer s.predWG.Done()
			r.Run(pctx)
		}()
	}
}

func (s *Stage) stopPredicate() {
	s.predMu.Lock()
	if s.predCancel != nil {
		s.predCancel()
		s.predCancel = nil
	}
	s.predMu.Unlock()
	s.predWG.Wait()
}

// stageSink is the Sink handed out for a stage: it records the edge from
// the enqueuing stage (nil: outside any stage) and refuses outside producers
// once the manager has begun to shut down.
type stageSink struct {
	st      *Stage
	from    string
	edge    *atomic.Uint64 // the traced edge from → st
	outside bool           // Stage.Sink: producers outside any stage
}

var (
	_ sink.Sink          = (*stageSink)(nil)
	_ sink.SpaceNotifier = (*stageSink)(nil)
	_ sink.Backlogger    = (*stageSink)(nil)
)

func (k *stageSink) refuse() error {
	if k.outside && k.st.mgr.stopping.Load() {
		return &sink.ClosedError{Sink: k.st.name}
	}
	return nil
}

func (k *stageSink) count(n int) { k.edge.Add(uint64(n)) }

func (k *stageSink) Enqueue(e sink.Event) error {
	if err := k.refuse(); err != nil {
		return err
	}
	if err := k.st.queue.Enqueue(e); err != nil {
		return k.st.removedError(err)
	}
	k.count(1)
	return nil
}

func (k *stageSink) EnqueueMany(es []sink.Event) error {
	if err := k.refuse(); err != nil {
		return err
	}
	if err := k.st.queue.EnqueueMany(es); err != nil {
		return k.st.removedError(err)
	}
	k.count(len(es))
	return nil
}

func (k *stageSink) EnqueueLossy(e sink.Event) bool {
	if k.refuse() != nil {
		return false
	}
	if !k.st.queue.EnqueueLossy(e) {
		return false
	}
	k.count(1)
	return true
}

func (k *stageSink) Prepare(es []sink.Event) (sink.Txn, error) {
	if err := k.refuse(); err != nil {
		return nil, err
	}
	t, err := k.st.queue.Prepare(es)
	if err != nil {
		return nil, k.st.removedError(err)
	}
	return &countedTxn{Txn: t, k: k, n: len(es)}, nil
}

type countedTxn struct {
	sink.Txn
	k    *stageSink
	n    int
	once sync.Once
}

func (t *countedTxn) Commit() {
	t.once.Do(func() {
		t.Txn.Commit()
		t.k.count(t.n)
	})
}

func (t *countedTxn) Abort() {
	t.once.Do(t.Txn.Abort)
}

func (k *stageSink) Len() int                               { return k.st.queue.Len() }
func (k *stageSink) Backlogged() bool                       { return k.st.queue.Backlogged() }
func (k *stageSink) Predicate() sink.Predicate              { return k.st.queue.Predicate() }
func (k *stageSink) SpaceSignal() (<-chan struct{}, func()) { return k.st.queue.SpaceSignal() }

// SetPredicate replaces the stage's admission predicate while traffic
// flows, under the current memory pressure; a predicate with a Run method
// gets its background loop started.
func (k *stageSink) SetPredicate(p sink.Predicate) {
	k.st.bindPool(p)
	k.st.mgr.installPredicate(k.st, p)
	if ctx := k.st.mgr.runContext(); ctx != nil {
		k.st.startPredicate(ctx, p)
	}
}

// String names the sink for logs.
func (k *stageSink) String() string { return "stage " + k.st.name }
