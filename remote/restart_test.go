package remote_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

func runServer(t *testing.T, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server did not start")
	}
	return s
}

// While the NATS server is down every enqueue is rejected to its sender
// (none hangs past the remote timeout); once it is back, the nodes
// reconnect and events flow again.
func TestNATSServerRestart(t *testing.T) {
	srv := runServer(t, -1)
	url := srv.ClientURL()
	c := &cluster{t: t, url: url}
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
	addr := srv.Addr().String()
	srv.Shutdown()
	srv.WaitForShutdown()
	if err := s.Enqueue("down"); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("server down: %v, want a rejection", err)
	}
	srv = restartOn(t, addr)
	defer srv.Shutdown()
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

func restartOn(t *testing.T, addr string) *server.Server {
	t.Helper()
	var port int
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			for _, ch := range addr[i+1:] {
				port = port*10 + int(ch-'0')
			}
			break
		}
	}
	return runServer(t, port)
}
