package remote_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

const deadGraph = `
global:
  cluster: {node: a}
stages:
  Work:
    handler: t.Work
    nodes: [b]
    queue: {threshold: 8}
    remote: {mode: durable, timeout: 1s, nakDelay: 10ms, maxDeliver: 3}
`

// failing is a handler whose every event fails, counting the attempts.
type failing struct{ calls atomic.Int64 }

func (f *failing) HandleEvents(batch []sink.Event) error {
	var errs []error
	for i := range batch {
		f.calls.Add(1)
		errs = append(errs, stage.FailEvent(i, errors.New("disk on fire")))
	}
	return errors.Join(errs...)
}

func gaugeValue(t *testing.T, m *stage.Manager, name string) int64 {
	t.Helper()
	g, ok := m.Metrics().Get(name).(interface{ Value() int64 })
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return g.Value()
}

// deadLetters returns the messages of a stage's dead-letter stream.
func deadLetters(t *testing.T, n *remote.Node, stageName string) []*nats.RawStreamMsg {
	t.Helper()
	js, err := n.Conn().JetStream()
	if err != nil {
		t.Fatal(err)
	}
	si, err := js.StreamInfo(n.DeadLetterStream(stageName))
	if err != nil {
		return nil
	}
	var out []*nats.RawStreamMsg
	for seq := si.State.FirstSeq; seq <= si.State.LastSeq && si.State.Msgs > 0; seq++ {
		if m, err := js.GetMsg(n.DeadLetterStream(stageName), seq); err == nil {
			out = append(out, m)
		}
	}
	return out
}

func TestDurableDeadLetterAfterMaxDeliver(t *testing.T) {
	c := &cluster{t: t}
	ma, na := c.node(deadGraph, "a", nil)
	work := &failing{}
	mb, _ := c.node(deadGraph, "b", map[string]stage.Handler{"Work": work})
	s := remoteSink(t, ma, "Work")
	if err := s.Enqueue("doomed"); err != nil {
		t.Fatal(err)
	}
	var dead []*nats.RawStreamMsg
	waitFor(t, "the dead letter", func() bool { dead = deadLetters(t, na, "Work"); return len(dead) == 1 })
	time.Sleep(300 * time.Millisecond) // a fourth delivery would come after nakDelay
	if got := work.calls.Load(); got != 3 {
		t.Fatalf("the handler saw the event %d times, want maxDeliver 3", got)
	}
	h := dead[0].Header
	if e := h.Get(remote.HeaderError); !strings.Contains(e, "disk on fire") {
		t.Errorf("dead letter's error %q, want the handler's", e)
	}
	if h.Get(remote.HeaderDeliveries) != "3" || h.Get(remote.HeaderStage) != "Work" || h.Get(remote.HeaderStreamSeq) != "1" {
		t.Errorf("dead letter's headers %v", h)
	}
	if dead[0].Subject != "sandstorm.dlq.Work" {
		t.Errorf("dead letter's subject %q", dead[0].Subject)
	}
	waitFor(t, "an empty work stream", func() bool { return s.Len() == 0 })
	if v := gaugeValue(t, mb, "remote.Work.deadletters"); v != 1 {
		t.Errorf("replica's remote.Work.deadletters = %d, want 1", v)
	}
	waitFor(t, "the dead letter in the sender's stats", func() bool {
		st, _ := remote.Stats(s)
		return st.DeadLettered == 1
	})
	if v := gaugeValue(t, ma, "remote.Work.deadletters"); v != 1 {
		t.Errorf("sender's remote.Work.deadletters = %d, want 1", v)
	}
}

// An event whose last delivery gets no answer at all (the handler hangs
// past remote.timeout) is moved to the dead letters from the server's
// max-deliveries advisory.
func TestDurableDeadLetterWithoutAnswer(t *testing.T) {
	graph := strings.Replace(deadGraph, "maxDeliver: 3", "maxDeliver: 2", 1)
	c := &cluster{t: t}
	ma, na := c.node(graph, "a", nil)
	gate := make(chan struct{})
	defer close(gate) // before the nodes' cleanups, which drain the stage
	hung := &recorder{gate: gate}
	mb, _ := c.node(graph, "b", map[string]stage.Handler{"Work": hung})
	s := remoteSink(t, ma, "Work")
	if err := s.Enqueue("stuck"); err != nil {
		t.Fatal(err)
	}
	var dead []*nats.RawStreamMsg
	waitFor(t, "the dead letter", func() bool { dead = deadLetters(t, na, "Work"); return len(dead) == 1 })
	h := dead[0].Header
	if e := h.Get(remote.HeaderError); !strings.Contains(e, "no acknowledgement after 2 deliveries") {
		t.Errorf("dead letter's error %q", e)
	}
	waitFor(t, "an empty work stream", func() bool { return s.Len() == 0 })
	if v := gaugeValue(t, mb, "remote.Work.deadletters"); v != 1 {
		t.Errorf("replica's remote.Work.deadletters = %d, want 1", v)
	}
}

// A replica's predicate refusing an event at every delivery sends it to
// the dead letters too (a refusal counts as a delivery), with the
// refusal as its error: it is not nak'd forever.
func TestDurableDeadLetterRefusedByPredicate(t *testing.T) {
	graph := strings.Replace(deadGraph, "queue: {threshold: 8}", "queue: {threshold: 8}\n    predicate: {type: rate, rate: 0.001, depth: 1}", 1)
	c := &cluster{t: t}
	ma, na := c.node(graph, "a", nil)
	work := &recorder{}
	_, _ = c.node(graph, "b", map[string]stage.Handler{"Work": work})
	s := remoteSink(t, ma, "Work")
	for _, e := range []string{"first", "second"} {
		if err := s.Enqueue(e); err != nil {
			t.Fatal(err)
		}
	}
	var dead []*nats.RawStreamMsg
	waitFor(t, "the dead letter", func() bool { dead = deadLetters(t, na, "Work"); return len(dead) == 1 })
	waitFor(t, "one event handled", func() bool { return work.count() == 1 })
	h := dead[0].Header
	if e := h.Get(remote.HeaderError); !strings.Contains(e, "reject") || h.Get(remote.HeaderDeliveries) != "3" {
		t.Errorf("dead letter's headers %v, want the predicate's refusal after 3 deliveries", h)
	}
	waitFor(t, "an empty work stream", func() bool { return s.Len() == 0 })
}
