package remote_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// recorder is a handler that records what it got and can be held.
type recorder struct {
	mu     sync.Mutex
	got    []sink.Event
	gate   chan struct{} // nil: never blocks
	failed atomic.Int64  // events still to fail, once each
	onEv   func(e sink.Event)
	// entered, if set, gets a signal when a batch arrives
	entered chan struct{}
}

func (r *recorder) HandleEvents(batch []sink.Event) error {
	if r.entered != nil {
		select {
		case r.entered <- struct{}{}:
		default:
		}
	}
	if r.gate != nil {
		<-r.gate
	}
	var errs []error
	for i, e := range batch {
		if r.failed.Add(-1) >= 0 {
			errs = append(errs, stage.FailEvent(i, errors.New("failing on purpose")))
			continue
		}
		r.mu.Lock()
		r.got = append(r.got, e)
		r.mu.Unlock()
		if r.onEv != nil {
			r.onEv(e)
		}
	}
	return errors.Join(errs...)
}

func (r *recorder) events() []sink.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sink.Event(nil), r.got...)
}

func (r *recorder) count() int { return len(r.events()) }

// waitFor polls cond until it holds or the test's patience ends.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type ping struct {
	N     int       `json:"n"`
	Reply sink.Sink `json:"-"`
}

var testCodecs = func() *remote.Codecs {
	c := remote.NewCodecs()
	remote.Register[ping](c, "test.ping")
	remote.Register[*ping](c, "test.*ping")
	return c
}()

type cluster struct {
	t   testing.TB
	url string
	// tune, if set, adjusts every node's cluster block (token, TLS).
	tune func(*remote.ClusterConfig)
	// log, if set, is every node's logger.
	log *slog.Logger
	// codecs, if set, are every node's (nil: testCodecs).
	codecs *remote.Codecs
}

// node starts one process's node of the graph in yaml, as name, with h as
// the handler of every stage it hosts ("t.<Stage>" handlers).
func (c *cluster) node(yaml, name string, hs map[string]stage.Handler) (*stage.Manager, *remote.Node) {
	t := c.t
	t.Helper()
	cfg, err := stage.ParseConfig([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg := stage.NewRegistry()
	for stName, h := range hs {
		reg.Register("t."+stName, func() stage.Handler { return h })
	}
	for _, ns := range cfg.Stages {
		if _, ok := reg.Lookup(ns.Config.Handler); !ok {
			reg.Register(ns.Config.Handler, func() stage.Handler { return &recorder{} })
		}
	}
	codecs := c.codecs
	if codecs == nil {
		codecs = testCodecs
	}
	m, n, err := remote.NewManager(cfg, reg, stage.Options{Logger: c.log}, remote.Options{Codecs: codecs}, func(cc *remote.ClusterConfig) {
		cc.Node = name
		cc.Heartbeat = 20 * time.Millisecond
		if c.url == "" {
			cc.Listen = "127.0.0.1:0"
		} else {
			cc.NATS = c.url
		}
		if c.tune != nil {
			c.tune(cc)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.url == "" {
		c.url = n.URL()
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
		_ = m.Shutdown(ctx)
		_ = n.Close()
	})
	return m, n
}

const requestGraph = `
global:
  cluster: {node: a}
stages:
  Src:  {handler: t.Src, nodes: [a]}
  Work:
    handler: t.Work
    nodes: [b]
    queue: {threshold: 4}
    remote: {mode: request, timeout: 2s}
  Picky:
    handler: t.Picky
    nodes: [b]
    predicate: {type: threshold, limit: 1}
`

func remoteSink(t *testing.T, m *stage.Manager, name string) sink.Sink {
	t.Helper()
	s, ok := m.RemoteSink(name)
	if !ok {
		t.Fatalf("no remote sink for %s", name)
	}
	return s
}

func TestRequestVerdicts(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(requestGraph, "a", nil)
	gate := make(chan struct{})
	work := &recorder{gate: gate}
	picky := &recorder{gate: gate}
	_, _ = c.node(requestGraph, "b", map[string]stage.Handler{"Work": work, "Picky": picky})
	defer close(gate)

	if _, ok := ma.Stage("Work"); ok {
		t.Fatal("node a hosts Work")
	}
	s := remoteSink(t, ma, "Work")
	// The handler is held: one batch in service, then the queue fills.
	accepted := 0
	var rejected error
	for i := range 20 {
		if err := s.Enqueue("e" + fmt.Sprint(i)); err != nil {
			rejected = err
			break
		}
		accepted++
	}
	if rejected == nil {
		t.Fatal("a full remote queue accepted everything")
	}
	var re *remote.RejectError
	if !errors.Is(rejected, sink.ErrRejected) || !errors.As(rejected, &re) || re.Node != "b" || re.Stage != "Work" {
		t.Fatalf("rejection %v does not name node b and stage Work", rejected)
	}
	if accepted < 4 {
		t.Fatalf("accepted %d, want at least the queue threshold 4", accepted)
	}

	p := remoteSink(t, ma, "Picky")
	var perr error
	for range 5 {
		if perr = p.Enqueue("x"); perr != nil {
			break
		}
	}
	if !errors.As(perr, &re) || re.Predicate == "" || !strings.Contains(perr.Error(), "predicate") {
		t.Fatalf("predicate rejection %v does not name its predicate", perr)
	}
}

func TestNoReplicaIsRejectedAtOnce(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(requestGraph, "a", nil)
	err := remoteSink(t, ma, "Work").Enqueue("x")
	if !errors.Is(err, sink.ErrRejected) || !strings.Contains(err.Error(), "no replica") {
		t.Fatalf("got %v, want a rejection for want of a replica", err)
	}
	st, _ := remote.Stats(remoteSink(t, ma, "Work"))
	if st.Retransmits != 0 {
		t.Fatalf("no replica took %d retransmissions; want none", st.Retransmits)
	}
}

func TestEnqueueManyIsOneMessage(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(requestGraph, "a", nil)
	work := &recorder{}
	_, _ = c.node(strings.Replace(requestGraph, "threshold: 4", "threshold: 1000", 1), "b", map[string]stage.Handler{"Work": work})
	s := remoteSink(t, ma, "Work")
	es := make([]sink.Event, 100)
	for i := range es {
		es[i] = i
	}
	if err := s.EnqueueMany(es); err != nil {
		t.Fatal(err)
	}
	st, _ := remote.Stats(s)
	if st.Sent != 1 || st.Events != 100 {
		t.Fatalf("stats %+v: want one request carrying 100 events", st)
	}
	g, ok := ma.Metrics().Get("remote.Work.events").(metrics.Gauge)
	if !ok || g.Value() != 100 {
		t.Fatalf("metric remote.Work.events = %v", g)
	}
	waitFor(t, "100 events handled", func() bool { return work.count() == 100 })
	got := work.events()
	for i, e := range got {
		if e != i {
			t.Fatalf("event %d is %v (%T)", i, e, e)
		}
	}
}

func TestUnregisteredTypeIsAClearError(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(requestGraph, "a", nil)
	type secret struct{ X int }
	err := remoteSink(t, ma, "Work").Enqueue(secret{1})
	if !errors.Is(err, remote.ErrNoCodec) || !errors.Is(err, sink.ErrRejected) || !strings.Contains(err.Error(), "secret") {
		t.Fatalf("got %v, want ErrNoCodec naming the type", err)
	}
}

func TestSinkInEventIsAReplyAddress(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(requestGraph, "a", nil)
	work := &recorder{}
	work.onEv = func(e sink.Event) {
		p := e.(*ping)
		if err := p.Reply.Enqueue(ping{N: p.N * 2}); err != nil {
			t.Errorf("reply: %v", err)
		}
	}
	_, _ = c.node(requestGraph, "b", map[string]stage.Handler{"Work": work})
	replies := sink.NewQueue(10)
	if err := remoteSink(t, ma, "Work").Enqueue(&ping{N: 21, Reply: replies}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reply", func() bool { return replies.Len() == 1 })
	got := replies.Discard()
	if len(got) != 1 || got[0].(ping).N != 42 {
		t.Fatalf("reply %v", got)
	}
}

func TestPrepareCommitAbort(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(requestGraph, "a", nil)
	work := &recorder{}
	_, _ = c.node(requestGraph, "b", map[string]stage.Handler{"Work": work})
	s := remoteSink(t, ma, "Work")
	tx, err := s.Prepare([]sink.Event{"aborted"})
	if err != nil {
		t.Fatal(err)
	}
	tx.Abort()
	tx, err = s.Prepare([]sink.Event{"committed"})
	if err != nil {
		t.Fatal(err)
	}
	tx.Commit()
	waitFor(t, "the committed event", func() bool { return work.count() == 1 })
	if err := s.Enqueue("after"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the next event", func() bool { return work.count() == 2 })
	if got := work.events(); got[0] != "committed" || got[1] != "after" {
		t.Fatalf("handled %v", got)
	}
}

// slowCodec holds the replica's decoding of the first request until the
// sender has retransmitted it.
type slow struct{ N int }

func TestRetransmissionIsHandledOnce(t *testing.T) {
	release := make(chan struct{})
	var first atomic.Bool
	codecs := remote.NewCodecs()
	remote.RegisterFunc(codecs, "test.slow",
		func(_ *remote.Wire, v slow) ([]byte, error) { return []byte{byte(v.N)}, nil },
		func(_ *remote.Wire, b []byte) (slow, error) {
			if first.CompareAndSwap(false, true) {
				<-release
			}
			return slow{N: int(b[0])}, nil
		})
	graph := strings.Replace(requestGraph, "remote: {mode: request, timeout: 2s}", "remote: {mode: request, timeout: 20s, retries: 9}", 1)
	cfg, _ := stage.ParseConfig([]byte(graph), "")
	regA, regB := stage.NewRegistry(), stage.NewRegistry()
	work := &recorder{}
	for _, r := range []*stage.Registry{regA, regB} {
		r.Register("t.Src", func() stage.Handler { return &recorder{} })
		r.Register("t.Picky", func() stage.Handler { return &recorder{} })
	}
	regA.Register("t.Work", func() stage.Handler { return &recorder{} })
	regB.Register("t.Work", func() stage.Handler { return work })
	ma, na, err := remote.NewManager(cfg, regA, stage.Options{}, remote.Options{Codecs: codecs}, func(cc *remote.ClusterConfig) {
		cc.Listen = "127.0.0.1:0"
	})
	if err != nil {
		t.Fatal(err)
	}
	defer na.Close()
	mb, nb, err := remote.NewManager(cfg, regB, stage.Options{}, remote.Options{Codecs: codecs}, func(cc *remote.ClusterConfig) {
		cc.Node, cc.NATS = "b", na.URL()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	for _, m := range []*stage.Manager{ma, mb} {
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown(context.Background())
	}
	s := remoteSink(t, ma, "Work")
	done := make(chan error, 1)
	go func() { done <- s.Enqueue(slow{7}) }()
	waitFor(t, "a retransmission", func() bool {
		select {
		case err := <-done: // its retransmission, if any, was counted before
			if st, _ := remote.Stats(s); st.Retransmits == 0 {
				t.Fatalf("the enqueue ended without a retransmission: %v", err)
			}
			done <- err
			return true
		default:
		}
		st, _ := remote.Stats(s)
		return st.Retransmits >= 1
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(slow{8}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second event", func() bool { return work.count() >= 2 })
	_ = mb.Shutdown(context.Background()) // drains: nothing more can come
	if got := work.events(); len(got) != 2 || got[0] != (slow{7}) || got[1] != (slow{8}) {
		t.Fatalf("handled %v, want [{7} {8}]: the retransmitted event once", got)
	}
}

// TestReplicaChosenByLoad: a sender sends each request to the replica
// that reported the shorter queue. The busy replica (its handler held)
// reports a queue longer than the idle one's could grow in the test, so
// every request goes to the idle one.
func TestReplicaChosenByLoad(t *testing.T) {
	c := &cluster{t: t}
	graph := strings.Replace(requestGraph, "threshold: 4", "threshold: 1000", 1)
	ma, _ := c.node(graph, "a", nil)
	gate := make(chan struct{})
	busy := &recorder{gate: gate}
	idle := &recorder{}
	_, _ = c.node(graph, "b", map[string]stage.Handler{"Work": busy})
	defer close(gate)
	s := remoteSink(t, ma, "Work")
	replicas := func(n int) func() bool {
		return func() bool { return s.(interface{ Replicas() int }).Replicas() == n }
	}
	// The busy replica alone takes a queue first: it is the only replica,
	// whether the sender knows it yet or sends to the queue group.
	waitFor(t, "the busy replica in rotation", replicas(1))
	const queued, sent = 200, 100
	for i := range queued {
		if err := s.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = c.node(graph, "b", map[string]stage.Handler{"Work": idle})
	waitFor(t, "both replicas in rotation", replicas(2))
	// The busy replica reports more than the idle one can hold: the idle
	// one's load (its queue, at most what it is sent here, and the
	// request in flight) stays below it.
	waitFor(t, "the busy replica's queue reported", func() bool { return s.Len() > sent+1 })
	for i := range sent {
		if err := s.Enqueue(queued + i); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every request at the idle replica", func() bool { return idle.count() == sent })
}

func TestNoClusterBlockStartsNoNATS(t *testing.T) {
	cfg, err := stage.ParseConfig([]byte("stages:\n  Work: {handler: t.Work, nodes: [b]}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	reg := stage.NewRegistry()
	reg.Register("t.Work", func() stage.Handler { return &recorder{} })
	m, n, err := remote.NewManager(cfg, reg, stage.Options{}, remote.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != nil {
		t.Fatal("a graph without a cluster block joined a cluster")
	}
	if _, ok := m.Stage("Work"); !ok {
		t.Fatal("without a cluster every stage is local")
	}
	if err := n.Shutdown(context.Background()); err != nil || n.Close() != nil {
		t.Fatal("nil Node methods fail")
	}
	_, _, err = remote.NewManager(cfg, reg, stage.Options{}, remote.Options{}, func(cc *remote.ClusterConfig) { cc.Node = "x" })
	if err == nil {
		t.Fatal("cluster flags without a cluster block were ignored")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"stages:\n  W: {handler: h, remote: {mode: carrier-pigeon}}\n", "line 2: stages.W.remote.mode: unknown remote mode"},
		{"stages:\n  W: {handler: h, remote: {timeout: -1s}}\n", "stages.W.remote.timeout: negative duration"},
		{"stages:\n  W: {handler: h, nodes: [\"\"]}\n", "stages.W.nodes: empty node name"},
		{"global:\n  cluster: {nats: x, bogus: 1}\n", "line 2: global.cluster.bogus"},
		{"global:\n  cluster: {node: a.b}\n", "not a NATS subject token"},
	} {
		_, err := stage.ParseConfig([]byte(tc.yaml), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestQueuedEventsOutliveTheirRequest: a replica decodes each request's
// events into a slice it reuses for the next request once the stage has
// taken them; events still queued in the stage (its handler is held),
// prepared but not committed, or admitted one by one from combined
// Enqueues must come out as they were sent, each once.
func TestQueuedEventsOutliveTheirRequest(t *testing.T) {
	s, work, release := heldWork(t, 100000)
	want := map[int]bool{}
	batch := func(from int) []sink.Event {
		es := make([]sink.Event, 50)
		for i := range es {
			es[i] = from + i
			want[from+i] = true
		}
		return es
	}
	txn, err := s.Prepare(batch(0))
	if err != nil {
		t.Fatal(err)
	}
	for b := 1; b <= 4; b++ {
		if err := s.EnqueueMany(batch(b * 100)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for g := range 16 { // concurrent Enqueues: combined requests
		want[1000+g] = true
		wg.Go(func() {
			if err := s.Enqueue(1000 + g); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	txn.Commit()
	release()
	waitFor(t, "every event handled", func() bool { return work.count() >= len(want) })
	got := map[int]int{}
	for _, e := range work.events() {
		n, ok := e.(int)
		if !ok || !want[n] {
			t.Fatalf("handled %v (%T), which was never sent", e, e)
		}
		got[n]++
	}
	for n := range want {
		if got[n] != 1 {
			t.Fatalf("event %d handled %d times, want once", n, got[n])
		}
	}
}

// TestConcurrentEnqueueManyAllOrNothing: concurrent EnqueueManys (and
// Enqueues) that a sink sends together are still each admitted whole or
// refused whole by the replica, each caller told its own verdict.
func TestConcurrentEnqueueManyAllOrNothing(t *testing.T) {
	s, work, release := heldWork(t, 10)
	const calls = 12
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for g := range calls {
		wg.Go(func() {
			if g%3 == 2 {
				errs[g] = s.Enqueue(100 * g)
				return
			}
			errs[g] = s.EnqueueMany([]sink.Event{100 * g, 100*g + 1, 100*g + 2})
		})
	}
	wg.Wait()
	admitted := 0
	for g, err := range errs {
		switch {
		case err == nil && g%3 == 2:
			admitted++
		case err == nil:
			admitted += 3
		case !errors.Is(err, sink.ErrRejected):
			t.Fatalf("call %d: %v, want nil or a rejection", g, err)
		}
	}
	// the handler holds the first batch it took, the queue the rest: at
	// most its threshold of 10 behind it
	if admitted == 0 || admitted > 10+10 {
		t.Fatalf("%d events admitted", admitted)
	}
	release()
	waitFor(t, "the admitted events handled", func() bool { return work.count() >= admitted })
	got := map[int]int{}
	for _, e := range work.events() {
		got[e.(int)]++
	}
	for g, err := range errs {
		n := 3
		if g%3 == 2 {
			n = 1
		}
		for i := range n {
			want := 1
			if err != nil {
				want = 0
			}
			if got[100*g+i] != want {
				t.Fatalf("call %d (err %v): event %d handled %d times, want %d", g, err, 100*g+i, got[100*g+i], want)
			}
		}
	}
	st, _ := remote.Stats(s)
	if int(st.Events) != admitted {
		t.Fatalf("stats count %d events admitted, the callers %d", st.Events, admitted)
	}
}

// heldWork starts nodes a and b, b hosting Work with a queue threshold of
// threshold and a handler that holds the first batch it gets until
// release is called (at the latest when the test ends), and returns a's
// remote sink for Work.
func heldWork(t *testing.T, threshold int) (s sink.Sink, work *recorder, release func()) {
	c := &cluster{t: t}
	ma, _ := c.node(requestGraph, "a", nil)
	gate := make(chan struct{})
	work = &recorder{gate: gate}
	graph := strings.Replace(requestGraph, "threshold: 4", fmt.Sprintf("threshold: %d", threshold), 1)
	_, _ = c.node(graph, "b", map[string]stage.Handler{"Work": work})
	release = sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	return remoteSink(t, ma, "Work"), work, release
}
