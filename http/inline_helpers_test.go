package http_test

import (
	"net"
	"testing"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// inlineServer starts a server with cfg on a free loopback port whose
// Inline hook hands every request to the returned channel (buffer deep),
// and dials one client to it; both close when the test ends.
func inlineServer(t *testing.T, cfg http.ServerConfig, buffer int) (<-chan *http.Request, net.Conn) {
	t.Helper()
	reqs := make(chan *http.Request, buffer)
	cfg.Inline = func(r *http.Request) bool {
		reqs <- r
		return true
	}
	return reqs, listenAndDial(t, cfg, sink.NewQueue(0))
}

// listenAndDial starts a server with cfg (its Socket.Addr set to a free
// loopback port) on the application sink s and dials one client to it;
// both close when the test ends.
func listenAndDial(t *testing.T, cfg http.ServerConfig, s sink.Sink) net.Conn {
	t.Helper()
	cfg.Socket.Addr = "127.0.0.1:0"
	srv, err := http.Listen(cfg, s, aio.Env{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	client, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}
