package stage_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// chanSink is a monitor sink that hands events to the test on a channel
// and rejects when the channel is full.
type chanSink struct {
	ch     chan sink.Event
	reject bool
}

func newChanSink(n int) *chanSink { return &chanSink{ch: make(chan sink.Event, n)} }

func (c *chanSink) Enqueue(e sink.Event) error {
	if c.reject {
		return &sink.RejectError{Sink: "test", Reason: "refuses everything"}
	}
	select {
	case c.ch <- e:
		return nil
	default:
		return &sink.RejectError{Sink: "test", Reason: "full"}
	}
}
func (c *chanSink) EnqueueMany(es []sink.Event) error {
	for _, e := range es {
		if err := c.Enqueue(e); err != nil {
			return err
		}
	}
	return nil
}
func (c *chanSink) EnqueueLossy(e sink.Event) bool { return c.Enqueue(e) == nil }
func (c *chanSink) Prepare([]sink.Event) (sink.Txn, error) {
	return nil, &sink.RejectError{Sink: "test", Reason: "no transactions"}
}
func (c *chanSink) Len() int                    { return len(c.ch) }
func (c *chanSink) SetPredicate(sink.Predicate) {}
func (c *chanSink) Predicate() sink.Predicate   { return nil }

// next returns the next monitor event. The timeout only guards against a
// hang; it decides nothing.
func (c *chanSink) next(t *testing.T) sink.Event {
	t.Helper()
	select {
	case e := <-c.ch:
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no monitor event (hang)")
		return nil
	}
}

// until reads monitor events until one satisfies ok, returning all read.
func (c *chanSink) until(t *testing.T, ok func(sink.Event) bool) []sink.Event {
	t.Helper()
	var out []sink.Event
	for {
		e := c.next(t)
		out = append(out, e)
		if ok(e) {
			return out
		}
	}
}

// rest drains what is buffered.
func (c *chanSink) rest() []sink.Event {
	var out []sink.Event
	for {
		select {
		case e := <-c.ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

func isTerminated(e sink.Event) bool { _, ok := e.(stage.StageTerminated); return ok }

func waitDone(t *testing.T, m *stage.Manager) {
	t.Helper()
	select {
	case <-m.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("manager did not stop (hang)")
	}
}

// checkEveryTenthFailed checks a handler that fails every tenth event
// (9, 19, ...) of the events 0 to len(seen)-1: each other event was
// handled once (seen counts it), and failures, what a monitor heard
// before the stage terminated, are one StageFailed for each failing
// event, which check checks further.
func checkEveryTenthFailed(t *testing.T, seen []atomic.Int32, failures []sink.Event, check func(stage.StageFailed)) {
	t.Helper()
	for i := range seen {
		want := int32(1)
		if i%10 == 9 {
			want = 0
		}
		if seen[i].Load() != want {
			t.Fatalf("event %d handled %d times", i, seen[i].Load())
		}
	}
	var failed []int
	for _, e := range failures {
		f, ok := e.(stage.StageFailed)
		if !ok {
			t.Fatalf("unexpected monitor event %#v", e)
		}
		check(f)
		failed = append(failed, f.Events[0].(int))
	}
	sort.Ints(failed)
	if len(failed) != len(seen)/10 {
		t.Fatalf("monitor saw %d failures, want %d", len(failed), len(seen)/10)
	}
	for k, v := range failed {
		if v != 10*k+9 {
			t.Fatalf("failure %d is event %d", k, v)
		}
	}
}

// TestPanicEveryTenthMonitored: a handler panicking on every tenth event
// loses no other event, and its monitor sees exactly those failures, then
// the termination.
func TestPanicEveryTenthMonitored(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 2}})
			const n = 2000
			var seen [n]atomic.Int32
			h := stage.HandlerFunc(func(b []sink.Event) error {
				for _, e := range b {
					i := e.(int)
					if i%10 == 9 {
						panic(fmt.Sprintf("event %d", i))
					}
					seen[i].Add(1)
				}
				return nil
			})
			st, err := m.CreateStage("Fragile", h, stage.StageConfig{
				Batching:   stage.BatchingConfig{Max: 1},
				ThreadPool: stage.ThreadPoolConfig{Min: 2, Max: 2},
			})
			if err != nil {
				t.Fatal(err)
			}
			mon := newChanSink(2 * n)
			if _, err := m.Monitor("Fragile", mon); err != nil {
				t.Fatal(err)
			}
			started(t, m)
			for i := 0; i < n; i++ {
				if err := st.Sink().Enqueue(i); err != nil {
					t.Fatal(err)
				}
			}
			shutdown(t, m)
			events := mon.rest()
			checkEveryTenthFailed(t, seen[:], events[:len(events)-1], func(f stage.StageFailed) {
				if !errors.Is(f.Err, stage.ErrHandlerPanic) || len(f.Events) != 1 || f.Stage != "Fragile" || f.Instance != 1 {
					t.Fatalf("failure %+v", f)
				}
			})
			term, ok := events[len(events)-1].(stage.StageTerminated)
			if !ok || term.Reason != stage.ReasonShutdown || !term.Normal() {
				t.Fatalf("last monitor event %#v", events[len(events)-1])
			}
			if m.MonitorRejections() != 0 || st.Stats().Failures != n/10 {
				t.Fatalf("rejections %d failures %d", m.MonitorRejections(), st.Stats().Failures)
			}
		})
	}
}

// counted is a supervised handler: it counts inits and destroys per stage
// name, records which instance handled each event, and fails on "boom".
type counted struct {
	name     string
	n        int // instance number, from the factory
	reg      *registry
	initErr  error
	failWith error
}

type registry struct {
	mu       sync.Mutex
	inits    map[string]int
	destroys map[string]int
	handled  map[string][]string // stage → "event@instance"
}

func newRegistry() *registry {
	return &registry{inits: map[string]int{}, destroys: map[string]int{}, handled: map[string][]string{}}
}

func (r *registry) factory(name string) stage.Factory {
	n := 0
	return func() stage.Handler {
		r.mu.Lock()
		defer r.mu.Unlock()
		n++
		return &counted{name: name, n: n, reg: r, failWith: errors.New("boom")}
	}
}

func (r *registry) count(m map[string]int, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m[name]
}

func (c *counted) Init(*stage.Context) error {
	c.reg.mu.Lock()
	c.reg.inits[c.name]++
	c.reg.mu.Unlock()
	return c.initErr
}

func (c *counted) Destroy() error {
	c.reg.mu.Lock()
	c.reg.destroys[c.name]++
	c.reg.mu.Unlock()
	return nil
}

func (c *counted) HandleEvents(b []sink.Event) error {
	for _, e := range b {
		if e == "boom" {
			return c.failWith
		}
		c.reg.mu.Lock()
		c.reg.handled[c.name] = append(c.reg.handled[c.name], fmt.Sprintf("%v@%d", e, c.n))
		c.reg.mu.Unlock()
	}
	return nil
}

type strategyCase struct {
	strategy  stage.Strategy
	restarted []string // in start order
}

// TestStrategies: a failure of B restarts B (one-for-one), A, B and C
// (one-for-all) or B and C (rest-for-one), counted by Init calls, on both
// thread managers.
func TestStrategies(t *testing.T) {
	tests := []strategyCase{
		{stage.OneForOne, []string{"B"}},
		{stage.OneForAll, []string{"A", "B", "C"}},
		{stage.RestForOne, []string{"B", "C"}},
	}
	for _, tm := range []string{"pool", "shared"} {
		for _, tt := range tests {
			t.Run(tm+"/"+string(tt.strategy), func(t *testing.T) { testStrategy(t, tm, tt) })
		}
	}
}

func testStrategy(t *testing.T, tm string, tt strategyCase) {
	reg := newRegistry()
	m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 2}})
	mon := newChanSink(100)
	for _, name := range []string{"A", "B", "C"} {
		f := reg.factory(name)
		if _, err := m.CreateStage(name, f(), stage.StageConfig{Factory: f}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Monitor(name, mon); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Supervise("G", stage.SupervisorConfig{Strategy: tt.strategy, RestartOn: stage.RestartOnError, Children: []string{"A", "B", "C"}}); err != nil {
		t.Fatal(err)
	}
	started(t, m)
	b, _ := m.Stage("B")
	if err := b.Sink().Enqueue("boom"); err != nil {
		t.Fatal(err)
	}
	var restarted []string
	for len(restarted) < len(tt.restarted) {
		switch e := mon.next(t).(type) {
		case stage.StageRestarted:
			if e.Supervisor != "G" || e.Instance != 2 {
				t.Fatalf("restart %+v", e)
			}
			restarted = append(restarted, e.Stage)
		case stage.StageFailed:
			if e.Stage != "B" || e.Events[0] != "boom" {
				t.Fatalf("failure %+v", e)
			}
		}
	}
	if !slices.Equal(restarted, tt.restarted) {
		t.Fatalf("restarted %v, want %v (in start order)", restarted, tt.restarted)
	}
	for _, name := range []string{"A", "B", "C"} {
		want := 1
		if slices.Contains(tt.restarted, name) {
			want = 2
		}
		if got := reg.count(reg.inits, name); got != want {
			t.Errorf("%s: %d inits, want %d", name, got, want)
		}
		if got := reg.count(reg.destroys, name); got != want-1 {
			t.Errorf("%s: %d destroys before shutdown, want %d", name, got, want-1)
		}
		st, _ := m.Stage(name)
		if err := st.Sink().Enqueue("after"); err != nil {
			t.Fatal(err)
		}
	}
	shutdown(t, m)
	for _, e := range mon.rest() {
		if r, ok := e.(stage.StageRestarted); ok {
			t.Fatalf("extra restart %+v", r)
		}
	}
	for _, name := range []string{"A", "B", "C"} {
		want := fmt.Sprintf("after@%d", reg.count(reg.inits, name))
		if got := reg.handled[name]; !slices.Equal(got, []string{want}) {
			t.Errorf("%s handled %v, want [%s]", name, got, want)
		}
	}
}

// gated blocks on its first batch until released, then fails it.
type gated struct {
	n       int
	entered chan struct{}
	release chan struct{}
	handled *[]string
	mu      *sync.Mutex
}

func (g *gated) HandleEvents(b []sink.Event) error {
	for _, e := range b {
		if e == "first" {
			close(g.entered)
			<-g.release
			return errors.New("first fails")
		}
		g.mu.Lock()
		*g.handled = append(*g.handled, fmt.Sprintf("%v@%d", e, g.n))
		g.mu.Unlock()
	}
	return nil
}

// TestQueuedEventsSurviveRestart: events queued while the handler fails
// and restarts stay in the queue and reach the new handler.
func TestQueuedEventsSurviveRestart(t *testing.T) {
	var mu sync.Mutex
	var handled []string
	entered, release := make(chan struct{}), make(chan struct{})
	n := 0
	f := func() stage.Handler {
		n++
		return &gated{n: n, entered: entered, release: release, handled: &handled, mu: &mu}
	}
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateSupervised("Worker", f, stage.StageConfig{Batching: stage.BatchingConfig{Max: 4},
		Supervisor: &stage.SupervisorConfig{RestartOn: stage.RestartOnError}})
	if err != nil {
		t.Fatal(err)
	}
	mon := newChanSink(100)
	_, _ = m.Monitor("Worker", mon)
	started(t, m)
	_ = st.Sink().Enqueue("first")
	<-entered
	for i := 0; i < 50; i++ {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	mon.until(t, func(e sink.Event) bool { _, ok := e.(stage.StageRestarted); return ok })
	shutdown(t, m)
	if len(handled) != 50 {
		t.Fatalf("handled %d of 50 queued events: %v", len(handled), handled)
	}
	for i, h := range handled {
		if h != fmt.Sprintf("%d@2", i) {
			t.Fatalf("event %d: %s (want it handled in order by the second handler)", i, h)
		}
	}
	if s := st.Stats(); s.Restarts != 1 || s.Failures != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// fakeClock is a settable clock for restart intensity windows.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var errBad = errors.New("bad event")

// failing fails every event; it counts its inits in a shared counter.
type failing struct{ inits *atomic.Int32 }

func (f *failing) Init(*stage.Context) error { f.inits.Add(1); return nil }
func (f *failing) HandleEvents([]sink.Event) error {
	return errBad
}

// TestIntensityWindow: restarts spread wider than the period never add up;
// bunched ones exceed the intensity and the root supervisor stops the
// manager.
func TestIntensityWindow(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	m := stage.NewManager(stage.Options{Now: clock.Now})
	var inits atomic.Int32
	st, err := m.CreateSupervised("S", func() stage.Handler { return &failing{inits: &inits} }, stage.StageConfig{
		Supervisor: &stage.SupervisorConfig{MaxRestarts: 2, Period: time.Minute, RestartOn: stage.RestartOnError, OnGiveUp: stage.GiveUpStop},
	})
	if err != nil {
		t.Fatal(err)
	}
	mon := newChanSink(100)
	_, _ = m.Monitor("S", mon)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted := func(e sink.Event) bool { _, ok := e.(stage.StageRestarted); return ok }
	for i := 0; i < 10; i++ {
		_ = st.Sink().Enqueue(i)
		mon.until(t, restarted)
		clock.Advance(61 * time.Second)
	}
	if inits.Load() != 11 {
		t.Fatalf("%d inits after 10 spread failures, want 11", inits.Load())
	}
	for i := 0; i < 2; i++ {
		_ = st.Sink().Enqueue(i)
		mon.until(t, restarted)
		clock.Advance(time.Second)
	}
	_ = st.Sink().Enqueue("last straw")
	events := mon.until(t, isTerminated)
	term := events[len(events)-1].(stage.StageTerminated)
	if term.Reason != stage.ReasonGaveUp || term.Normal() || !errors.Is(term.Err, stage.ErrGaveUp) {
		t.Fatalf("termination %+v", term)
	}
	waitDone(t, m)
	if err := m.Err(); !errors.Is(err, stage.ErrGaveUp) || !errors.Is(err, errBad) {
		t.Fatalf("Err = %v", err)
	}
	if inits.Load() != 13 {
		t.Fatalf("%d inits, want 13", inits.Load())
	}
	if err := m.Shutdown(context.Background()); !errors.Is(err, stage.ErrManagerClosed) {
		t.Fatalf("Shutdown after give-up: %v", err)
	}
}

// TestEscalation: a sub-supervisor that exceeds its intensity escalates to
// its parent, which restarts the whole subtree per its strategy; when the
// parent (the root) exceeds its own, the manager stops cleanly, draining
// the other stages.
func TestEscalation(t *testing.T) {
	m := stage.NewManager(stage.Options{}) // real clock, long periods
	var sInits, xInits atomic.Int32
	s, err := m.CreateStage("S", &failing{inits: &sInits}, stage.StageConfig{
		Factory: func() stage.Handler { return &failing{inits: &sInits} },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateStage("X", &failing{inits: &xInits}, stage.StageConfig{
		Factory: func() stage.Handler { return &failing{inits: &xInits} },
	}); err != nil {
		t.Fatal(err)
	}
	var other atomic.Int32
	gate := make(chan struct{})
	o, _ := m.CreateStage("Other", stage.HandlerFunc(func(b []sink.Event) error {
		<-gate
		other.Add(int32(len(b)))
		return nil
	}), stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}})
	for _, sc := range []struct {
		name string
		cfg  stage.SupervisorConfig
	}{
		{"Sub", stage.SupervisorConfig{MaxRestarts: 2, Period: time.Hour, RestartOn: stage.RestartOnError, Children: []string{"S"}}},
		{"Top", stage.SupervisorConfig{Strategy: stage.OneForAll, MaxRestarts: 1, Period: time.Hour, RestartOn: stage.RestartOnError, OnGiveUp: stage.GiveUpStop, Children: []string{"Sub", "X"}}},
	} {
		if err := m.Supervise(sc.name, sc.cfg); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Supervisors(); !slices.Equal(got, []string{"Sub", "Top"}) {
		t.Fatalf("supervisors %v", got)
	}
	monS, monX := newChanSink(100), newChanSink(100)
	_, _ = m.Monitor("S", monS)
	_, _ = m.Monitor("X", monX)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	restartedBy := func(sup string) func(sink.Event) bool {
		return func(e sink.Event) bool {
			r, ok := e.(stage.StageRestarted)
			if ok && r.Supervisor != sup {
				t.Fatalf("restart by %q, want %q", r.Supervisor, sup)
			}
			return ok
		}
	}
	for round := 0; round < 2; round++ {
		_ = s.Sink().Enqueue("a")
		monS.until(t, restartedBy("Sub"))
		_ = s.Sink().Enqueue("b")
		monS.until(t, restartedBy("Sub"))
		if round == 1 {
			break
		}
		_ = s.Sink().Enqueue("c") // Sub gives up: Top restarts S and X
		monS.until(t, restartedBy("Top"))
		monX.until(t, restartedBy("Top"))
		if sInits.Load() != 4 || xInits.Load() != 2 {
			t.Fatalf("after escalation: S %d inits, X %d", sInits.Load(), xInits.Load())
		}
	}
	for i := 0; i < 20; i++ {
		_ = o.Sink().Enqueue(i)
	}
	_ = s.Sink().Enqueue("c") // Sub gives up again, Top too: the manager stops
	close(gate)
	waitDone(t, m)
	if err := m.Err(); !errors.Is(err, stage.ErrGaveUp) || !errors.Is(err, errBad) {
		t.Fatalf("Err = %v", err)
	}
	if other.Load() != 20 {
		t.Fatalf("Other handled %d of 20 queued events: the stop was not clean", other.Load())
	}
	for name, mon := range map[string]*chanSink{"S": monS, "X": monX} {
		events := mon.rest()
		term, ok := events[len(events)-1].(stage.StageTerminated)
		if !ok || term.Reason != stage.ReasonGaveUp {
			t.Fatalf("%s: last event %#v", name, events[len(events)-1])
		}
	}
	if sInits.Load() != 6 || xInits.Load() != 2 {
		t.Fatalf("S %d inits, X %d", sInits.Load(), xInits.Load())
	}
}

// TestRestartInitFailureRetries: a fresh handler whose Init fails counts as
// another failure; the supervisor tries again within its intensity.
func TestRestartInitFailureRetries(t *testing.T) {
	reg := newRegistry()
	base := reg.factory("S")
	calls := 0
	f := func() stage.Handler {
		calls++
		h := base().(*counted)
		if calls == 2 {
			h.initErr = errors.New("no database")
		}
		return h
	}
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateSupervised("S", f, stage.StageConfig{Supervisor: &stage.SupervisorConfig{RestartOn: stage.RestartOnError}})
	if err != nil {
		t.Fatal(err)
	}
	mon := newChanSink(100)
	_, _ = m.Monitor("S", mon)
	started(t, m)
	_ = st.Sink().Enqueue("boom")
	events := mon.until(t, func(e sink.Event) bool { _, ok := e.(stage.StageRestarted); return ok })
	if len(events) != 3 {
		t.Fatalf("monitor events %#v", events)
	}
	if f, ok := events[1].(stage.StageFailed); !ok || !errors.Is(f.Err, stage.ErrInit) || f.Instance != 2 {
		t.Fatalf("second event %#v, want the Init failure of instance 2", events[1])
	}
	if r := events[2].(stage.StageRestarted); r.Instance != 3 {
		t.Fatalf("restart %+v", r)
	}
	_ = st.Sink().Enqueue("ok")
	shutdown(t, m)
	if got := reg.handled["S"]; !slices.Equal(got, []string{"ok@3"}) {
		t.Fatalf("handled %v", got)
	}
	if s := st.Stats(); s.Restarts != 2 || s.Failures != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestMonitorLifecycle(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	h := stage.HandlerFunc(func([]sink.Event) error { return errBad })
	st, _ := m.CreateStage("S", h, stage.StageConfig{})
	if _, err := m.Monitor("Nope", newChanSink(1)); !errors.Is(err, stage.ErrNoStage) {
		t.Fatalf("unknown stage: %v", err)
	}
	if _, err := m.Monitor("S", nil); !errors.Is(err, stage.ErrMonitor) {
		t.Fatalf("nil sink: %v", err)
	}
	kept, dropped, refusing := newChanSink(10), newChanSink(10), &chanSink{reject: true}
	_, _ = m.Monitor("S", kept)
	cancel, _ := m.Monitor("S", dropped)
	_, _ = m.Monitor("S", refusing)
	cancel()
	started(t, m)
	_ = st.Sink().Enqueue(1)
	if f, ok := kept.next(t).(stage.StageFailed); !ok || !errors.Is(f.Err, errBad) {
		t.Fatalf("got %#v", f)
	}
	if err := m.DestroyStage("S"); err != nil {
		t.Fatal(err)
	}
	if term, ok := kept.next(t).(stage.StageTerminated); !ok || term.Reason != stage.ReasonDestroyed {
		t.Fatalf("got %#v", term)
	}
	if len(dropped.rest()) != 0 {
		t.Fatal("a cancelled monitor got events")
	}
	if m.MonitorRejections() != 2 {
		t.Fatalf("%d rejections counted, want 2 (failure and termination)", m.MonitorRejections())
	}
}

// TestMonitoringStageDuringShutdown: a stage monitoring another gets its
// termination even though the manager refuses outside producers by then.
func TestMonitoringStageDuringShutdown(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	_, _ = m.CreateStage("Watched", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{})
	c := &collector{}
	watcher, _ := m.CreateStage("Watcher", c, stage.StageConfig{})
	if _, err := m.Monitor("Watched", watcher.Sink()); err != nil {
		t.Fatal(err)
	}
	started(t, m)
	shutdown(t, m)
	got := c.snapshot()
	if len(got) != 1 {
		t.Fatalf("watcher got %#v", got)
	}
	if term, ok := got[0].(stage.StageTerminated); !ok || term.Stage != "Watched" || term.Reason != stage.ReasonShutdown {
		t.Fatalf("watcher got %#v", got[0])
	}
	if m.Err() != nil {
		t.Fatalf("Err after clean shutdown: %v", m.Err())
	}
}

func TestSuperviseErrors(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	noop := stage.HandlerFunc(func([]sink.Event) error { return nil })
	f := func() stage.Handler { return noop }
	_, _ = m.CreateStage("Plain", noop, stage.StageConfig{})
	_, _ = m.CreateStage("A", noop, stage.StageConfig{Factory: f})
	_, _ = m.CreateStage("B", noop, stage.StageConfig{Factory: f})
	_, _ = m.CreateSupervised("Own", f, stage.StageConfig{})
	if err := m.Supervise("G1", stage.SupervisorConfig{Children: []string{"A", "Own"}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  stage.SupervisorConfig
	}{
		{"G2", stage.SupervisorConfig{Children: []string{"A"}}},      // A already in G1
		{"G3", stage.SupervisorConfig{Children: []string{"Own"}}},    // Own's supervisor is in G1
		{"G4", stage.SupervisorConfig{Children: []string{"Plain"}}},  // no factory
		{"G5", stage.SupervisorConfig{Children: []string{"Nope"}}},   // unknown
		{"G6", stage.SupervisorConfig{Children: []string{"B", "B"}}}, // twice
		{"G7", stage.SupervisorConfig{}},                             // no children
		{"G8", stage.SupervisorConfig{Strategy: "all-for-none", Children: []string{"B"}}},
		{"G9", stage.SupervisorConfig{MaxRestarts: -1, Children: []string{"B"}}},
		{"B", stage.SupervisorConfig{Children: []string{"G1"}}}, // a stage's name
		{"G1", stage.SupervisorConfig{Children: []string{"B"}}}, // defined twice
		{"", stage.SupervisorConfig{Children: []string{"B"}}},
	}
	for _, tt := range tests {
		if err := m.Supervise(tt.name, tt.cfg); !errors.Is(err, stage.ErrSupervisor) {
			t.Errorf("Supervise(%q, %+v) = %v, want ErrSupervisor", tt.name, tt.cfg, err)
		}
	}
	if err := m.Supervise("Top", stage.SupervisorConfig{Children: []string{"G1", "B"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateStage("NoFactory", noop, stage.StageConfig{Supervisor: &stage.SupervisorConfig{}}); !errors.Is(err, stage.ErrInvalidConfig) {
		t.Fatalf("supervised without a factory: %v", err)
	}
	if _, err := m.CreateStage("Bad", noop, stage.StageConfig{Factory: f, Supervisor: &stage.SupervisorConfig{Period: -time.Second}}); !errors.Is(err, stage.ErrInvalidConfig) {
		t.Fatalf("negative period: %v", err)
	}
}

// flaky is registered for the YAML test: it fails on "boom".
type flaky struct{ inits *atomic.Int32 }

func (f *flaky) Init(*stage.Context) error { f.inits.Add(1); return nil }
func (f *flaky) HandleEvents(b []sink.Event) error {
	if b[0] == "boom" {
		panic("boom")
	}
	return nil
}

func TestSupervisionFromYAML(t *testing.T) {
	var inits atomic.Int32
	reg := stage.NewRegistry()
	reg.Register("test.Flaky", func() stage.Handler { return &flaky{inits: &inits} })
	m, err := stage.Parse([]byte(`
stages:
  Front: {handler: test.Flaky}
  Back:
    handler: test.Flaky
    supervisor: {maxRestarts: 10, period: 1m, restartOn: error}
supervisors:
  App:
    strategy: one-for-all
    restartOn: error
    children: [Front, Back]
`), reg)
	if err != nil {
		t.Fatal(err)
	}
	monFront, monBack := newChanSink(10), newChanSink(10)
	_, _ = m.Monitor("Front", monFront)
	_, _ = m.Monitor("Back", monBack)
	started(t, m)
	restartedBy := func(sup string) func(sink.Event) bool {
		return func(e sink.Event) bool {
			r, ok := e.(stage.StageRestarted)
			return ok && r.Supervisor == sup
		}
	}
	back, _ := m.Stage("Back")
	_ = back.Sink().Enqueue("boom") // Back's own supervisor restarts Back only
	monBack.until(t, restartedBy("Back"))
	front, _ := m.Stage("Front")
	_ = front.Sink().Enqueue("boom") // App restarts both
	monFront.until(t, restartedBy("App"))
	monBack.until(t, restartedBy("App"))
	shutdown(t, m)
	if back.Stats().Restarts != 2 || front.Stats().Restarts != 1 || inits.Load() != 5 {
		t.Fatalf("restarts Back %d Front %d, inits %d", back.Stats().Restarts, front.Stats().Restarts, inits.Load())
	}
}
