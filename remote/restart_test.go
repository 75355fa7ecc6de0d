package remote_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/natstest"
	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// While the NATS server is down every enqueue is rejected to its sender
// (none hangs past the remote timeout); once it is back, the nodes
// reconnect and events flow again.
func TestNATSServerRestart(t *testing.T) {
	srv := natstest.Start(t, natstest.Config{})
	c := &cluster{t: t, url: srv.URL()}
	graph := `
global:
  cluster: {node: a}
stages:
  Work:
    handler: t.Work
    nodes: [b]
    remote: {mode: request, timeout: 500ms, retries: -1}
`
	ma, _ := c.node(graph, "a", nil)
	work := &recorder{}
	_, _ = c.node(graph, "b", map[string]stage.Handler{"Work": work})
	s := remoteSink(t, ma, "Work")
	if err := s.Enqueue("before"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := s.Enqueue("down"); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("server down: %v, want a rejection", err)
	}
	srv.Restart()
	waitFor(t, "events flowing again", func() bool { return s.Enqueue("after") == nil })
	waitFor(t, "the events handled", func() bool {
		got := work.events()
		return len(got) >= 2 && got[0] == "before" && got[len(got)-1] == "after"
	})
	for _, e := range work.events() {
		if e == "down" {
			t.Fatal("an event rejected while the server was down was handled")
		}
	}
}

// homed is an event that belongs to one instance (SetHome): a reply.
type homed struct {
	To string `json:"to"`
	N  int    `json:"n"`
}

// A reply (an event with a home) enqueued while the NATS server is down
// waits for the server to come back and reaches its home, its sender
// getting nil; an event any replica could take is rejected at once
// ("cut off from NATS"), and nothing hangs.
func TestReplyWaitsForTheLink(t *testing.T) {
	srv := natstest.Start(t, natstest.Config{})
	codecs := remote.NewCodecs()
	remote.Register[homed](codecs, "test.homed")
	remote.SetHome(codecs, func(h homed) string { return h.To })
	c := &cluster{t: t, url: srv.URL(), codecs: codecs}
	graph := `
global:
  cluster: {node: a}
stages:
  Inbox:
    handler: t.Inbox
    nodes: [b]
    remote: {mode: request, timeout: 30s}
  Work:
    handler: t.Work
    nodes: [b]
    remote: {mode: request, timeout: 30s}
`
	ma, na := c.node(graph, "a", nil)
	inbox := &recorder{}
	_, nb := c.node(graph, "b", map[string]stage.Handler{"Inbox": inbox, "Work": &recorder{}})
	replies, work := remoteSink(t, ma, "Inbox"), remoteSink(t, ma, "Work")
	if err := replies.Enqueue(homed{To: nb.Instance(), N: 1}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	waitFor(t, "node a cut off", func() bool { return !na.Conn().IsConnected() })
	err := work.Enqueue("anyone's")
	if !errors.Is(err, sink.ErrRejected) || !strings.Contains(err.Error(), "cut off from NATS") {
		t.Fatalf("an event any replica could take, while cut off: %v, want a rejection saying so", err)
	}
	before, _ := remote.Stats(replies)
	done := make(chan error, 1)
	go func() { done <- replies.Enqueue(homed{To: nb.Instance(), N: 2}) }()
	waitFor(t, "the reply sent", func() bool {
		st, _ := remote.Stats(replies)
		return st.Sent > before.Sent
	})
	srv.Restart()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a reply made while cut off: %v, want it delivered once the server is back", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a criterion
		t.Fatal("the reply made while cut off never got its verdict")
	}
	waitFor(t, "the reply handled at its home", func() bool { return inbox.count() == 2 })
}
