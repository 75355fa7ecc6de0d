package remote_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// slowDurableGraph hosts Work on b (and c, if started), one event at a
// time, with an acknowledgement wait of 1s.
const slowDurableGraph = `
global:
  cluster: {node: a}
stages:
  Src: {handler: t.Src, nodes: [a]}
  Work:
    handler: t.Work
    nodes: [b, c]
    queue: {threshold: 64}
    threadpool: {min: 1, max: 1}
    batching: {max: 1}
    remote: {mode: durable, timeout: 1s, nakDelay: 10ms, maxDeliver: 50}
`

// stepper handles one event per value received on step, and counts
// what it handled by event.
type stepper struct {
	step    chan struct{}
	entered chan struct{} // a token when a batch arrives
	mu      sync.Mutex
	handled map[sink.Event]int
}

func newStepper() *stepper {
	return &stepper{step: make(chan struct{}), entered: make(chan struct{}, 1), handled: map[sink.Event]int{}}
}

func (s *stepper) HandleEvents(batch []sink.Event) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	for _, e := range batch {
		<-s.step
		s.mu.Lock()
		s.handled[e]++
		s.mu.Unlock()
	}
	return nil
}

func (s *stepper) times(e sink.Event) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handled[e]
}

// queued returns how many events wait in the queue of m's stage Work.
func queued(m *stage.Manager) int {
	st, ok := m.Stage("Work")
	if !ok {
		return -1
	}
	return st.Sink().Len()
}

func gauge(t *testing.T, m *stage.Manager, name string) int64 {
	t.Helper()
	g, ok := m.Metrics().Get(name).(interface{ Value() int64 })
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return g.Value()
}

// TestDurableSlowReplicaKeepsWhatItQueued: a replica that pulled twelve
// events and handles one about every 150 ms keeps the last ones queued
// for longer than the acknowledgement wait (1s); since its stage keeps
// finishing events, it renews their waits, and none is redelivered or
// handled twice.
func TestDurableSlowReplicaKeepsWhatItQueued(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(slowDurableGraph, "a", nil)
	work := newStepper()
	mb, _ := c.node(slowDurableGraph, "b", map[string]stage.Handler{"Work": work})
	s := remoteSink(t, ma, "Work")
	const n = 12
	for i := range n {
		if err := s.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	<-work.entered
	waitFor(t, "every event pulled into b's queue", func() bool { return queued(mb) == n-1 })
	for range n {
		time.Sleep(150 * time.Millisecond) // the handler's pace (the scenario, not a criterion)
		work.step <- struct{}{}
	}
	// Anything redelivered would now be handled again.
	go func() {
		for range work.step {
		}
	}()
	close(work.step)
	waitFor(t, "an empty stream", func() bool { return s.Len() == 0 })
	for i := range n {
		if k := work.times(i); k != 1 {
			t.Errorf("event %d handled %d times", i, k)
		}
	}
	if r := gauge(t, mb, "remote.Work.redelivered"); r != 0 {
		t.Errorf("%d redeliveries to the slow replica", r)
	}
	if gauge(t, mb, "remote.Work.inProgress") == 0 {
		t.Error("no acknowledgement wait renewed")
	}
}

// TestDurableStuckReplicaRenewsNothing: a replica whose only handler
// thread is stuck finishes nothing, so it renews no wait: the events it
// pulled are redelivered and handled by another replica.
func TestDurableStuckReplicaRenewsNothing(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(slowDurableGraph, "a", nil)
	stuck := newStepper() // never stepped until the test ends
	t.Cleanup(func() { close(stuck.step) })
	mb, _ := c.node(slowDurableGraph, "b", map[string]stage.Handler{"Work": stuck})
	s := remoteSink(t, ma, "Work")
	const n = 4
	for i := range n {
		if err := s.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	<-stuck.entered
	waitFor(t, "every event pulled into b's queue", func() bool { return queued(mb) == n-1 })
	other := &recorder{}
	_, _ = c.node(slowDurableGraph, "c", map[string]stage.Handler{"Work": other})
	waitFor(t, "every event handled by the other replica", func() bool {
		got := map[sink.Event]bool{}
		for _, e := range other.events() {
			got[e] = true
		}
		return len(got) == n
	})
	if p := gauge(t, mb, "remote.Work.inProgress"); p != 0 {
		t.Errorf("the stuck replica renewed %d waits", p)
	}
}
