package remote_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// slowDurableGraph hosts Work on b (and c, if started), one event at a
// time, with an acknowledgement wait of 1s (the slow replica's test
// makes it 2s; the give-back test adds a queue.max_time).
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

// waitHeld waits until work's handler holds one of n events and the
// other n-1 wait in the queue of m's stage Work.
func waitHeld(t *testing.T, work *stepper, m *stage.Manager, n int) {
	t.Helper()
	<-work.entered
	waitFor(t, "every event pulled into the replica's queue", func() bool { return queued(m) == n-1 })
}

// drainPaced lets work handle n events, one every 250 ms (the scenario's
// pace, not a criterion), then any more at once (a redelivered one would
// be handled again), waits until the stream is empty and fails the test
// for an event 0..n-1 not handled exactly once.
func drainPaced(t *testing.T, work *stepper, s sink.Sink, n int) {
	t.Helper()
	for range n {
		time.Sleep(250 * time.Millisecond)
		work.step <- struct{}{}
	}
	close(work.step)
	waitFor(t, "an empty stream", func() bool { return s.Len() == 0 })
	for i := range n {
		if k := work.times(i); k != 1 {
			t.Errorf("event %d handled %d times", i, k)
		}
	}
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

// TestDurableSlowReplicaKeepsWhatItQueued: a replica that pulled twenty
// events (twenty messages, or one message of twenty) and handles one
// about every 250 ms keeps the last ones queued for longer than twice the
// acknowledgement wait (2s); since its stage keeps making progress, it
// renews their waits, and none is redelivered or handled twice.
func TestDurableSlowReplicaKeepsWhatItQueued(t *testing.T) {
	graph := strings.Replace(slowDurableGraph, "timeout: 1s", "timeout: 2s", 1)
	for _, oneMessage := range []bool{false, true} {
		t.Run(map[bool]string{false: "a message each", true: "one message"}[oneMessage], func(t *testing.T) {
			c := &cluster{t: t}
			ma, _ := c.node(graph, "a", nil)
			work := newStepper()
			mb, _ := c.node(graph, "b", map[string]stage.Handler{"Work": work})
			s := remoteSink(t, ma, "Work")
			const n = 20
			es := make([]sink.Event, n)
			for i := range es {
				es[i] = i
			}
			if oneMessage {
				if err := s.EnqueueMany(es); err != nil {
					t.Fatal(err)
				}
			} else {
				for _, e := range es {
					if err := s.Enqueue(e); err != nil {
						t.Fatal(err)
					}
				}
			}
			waitHeld(t, work, mb, n)
			drainPaced(t, work, s, n)
			if r := gauge(t, mb, "remote.Work.redelivered"); r != 0 {
				t.Errorf("%d redeliveries to the slow replica", r)
			}
			if gauge(t, mb, "remote.Work.inProgress") == 0 {
				t.Error("no acknowledgement wait renewed")
			}
		})
	}
}

// TestDurableDroppedEventsAreGivenBack: events the stage drops from its
// queue (older than queue.max_time when their turn comes) never reach a
// handler; while the stage goes on handling others, their deliveries
// are renewed only up to max_time plus one wait, then nak'd: they come
// back and are handled.
func TestDurableDroppedEventsAreGivenBack(t *testing.T) {
	graph := strings.Replace(slowDurableGraph, "queue: {threshold: 64}", "queue: {threshold: 64, max_time: 200ms}", 1)
	c := &cluster{t: t}
	ma, _ := c.node(graph, "a", nil)
	work := newStepper()
	t.Cleanup(func() { close(work.step) })
	mb, _ := c.node(graph, "b", map[string]stage.Handler{"Work": work})
	s := remoteSink(t, ma, "Work")
	for i := range 3 {
		if err := s.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	<-work.entered // 0 in the handler, 1 and 2 queued
	waitFor(t, "1 and 2 queued at b", func() bool { return queued(mb) == 2 })
	time.Sleep(300 * time.Millisecond) // 1 and 2 grow older than max_time
	work.step <- struct{}{}            // 0 done; 1 and 2 are dropped
	// Keep the stage busy with new events, one every 100 ms, until 1
	// and 2 came back and were handled.
	for i := 3; work.times(1) == 0 || work.times(2) == 0; i++ {
		if i > 300 {
			t.Fatalf("events 1 and 2 never came back (handled %d and %d times)", work.times(1), work.times(2))
		}
		if err := s.Enqueue(i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		work.step <- struct{}{}
	}
	if g := gauge(t, mb, "remote.Work.givenBack"); g == 0 {
		t.Error("no delivery counted as given back")
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
	waitHeld(t, stuck, mb, n)
	other := &recorder{}
	_, _ = c.node(slowDurableGraph, "c", map[string]stage.Handler{"Work": other})
	waitFor(t, "every event handled by the other replica", func() bool {
		got := map[sink.Event]bool{}
		for _, e := range other.events() {
			got[e] = true
		}
		return len(got) == n
	})
}

// TestDurableDrainKeepsWhatItHolds: a replica shut down (Node.Shutdown:
// it pulls no more) while eight events wait in its queue drains them at
// one per 250 ms, longer than the acknowledgement wait (1s); it goes on
// renewing their waits meanwhile, so none goes to the replica started
// after it.
func TestDurableDrainKeepsWhatItHolds(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(slowDurableGraph, "a", nil)
	work := newStepper()
	mb, nb := c.node(slowDurableGraph, "b", map[string]stage.Handler{"Work": work})
	s := remoteSink(t, ma, "Work")
	const n = 8
	for i := range n {
		if err := s.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	waitHeld(t, work, mb, n)
	if err := nb.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	other := &recorder{}
	_, _ = c.node(slowDurableGraph, "c", map[string]stage.Handler{"Work": other})
	drainPaced(t, work, s, n)
	if got := other.events(); len(got) != 0 {
		t.Errorf("the draining replica's events %v went to the other replica", got)
	}
}
