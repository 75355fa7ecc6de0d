// Package natstest runs a NATS server inside a test process, so that the
// test can stop it and start it again on the same port (and, with
// JetStream, on the same store): the fault of a restarted server, seen by
// nodes that reconnect on their own.
//
//	srv := natstest.Start(t, natstest.Config{StoreDir: t.TempDir()})
//	... join nodes to srv.URL() ...
//	srv.Stop()    // the server goes away, its connections drop
//	srv.Restart() // back on the same address, with the same store
//
// The test's cleanup shuts down the server if it is running.
package natstest

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config says what server to run. The zero value is a core NATS server
// (no JetStream) on 127.0.0.1 at a free port.
type Config struct {
	// StoreDir, if not empty, turns JetStream on with its file store in
	// this folder, which Restart keeps (give it a t.TempDir()).
	StoreDir string
}

// Server is a NATS server run by a test, on the port its first start
// took.
type Server struct {
	t    testing.TB
	cfg  Config
	port int
	url  string

	mu  sync.Mutex
	srv *server.Server // nil while stopped
}

// Start runs a server for t and waits until it accepts connections,
// failing the test if it does not.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	s := &Server{t: t, cfg: cfg, port: -1} // nats-server: -1 is any free port
	s.start()
	s.port = s.srv.Addr().(*net.TCPAddr).Port
	s.url = s.srv.ClientURL()
	t.Cleanup(s.Stop)
	return s
}

// URL is the address clients join with (nats://127.0.0.1:PORT); it
// stays the same across restarts.
func (s *Server) URL() string { return s.url }

// Stop shuts the server down and waits until it is gone; a stopped
// server is left alone.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart stops the server if it runs and starts it again on the same
// port with the same JetStream store, waiting until it accepts
// connections (and has recovered its streams).
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

func (s *Server) start() {
	s.t.Helper()
	// A fresh Options each time: nats-server fills in the one it is given.
	opts := &server.Options{ServerName: "natstest", Host: "127.0.0.1", Port: s.port, NoLog: true, NoSigs: true}
	if s.cfg.StoreDir != "" {
		opts.JetStream, opts.StoreDir = true, s.cfg.StoreDir
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		s.t.Fatalf("natstest: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		s.t.Fatal("natstest: the NATS server did not start")
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
}
