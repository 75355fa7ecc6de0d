package remote_test

import (
	"errors"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/natstest"
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
