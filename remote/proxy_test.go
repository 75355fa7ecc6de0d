package remote_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// linkProxy stands between one node and the NATS server, on loopback
// TCP, so that a test can cut that node alone off NATS (a partition):
// cut closes the node's connection and refuses its reconnections (the
// node keeps trying, as it would across a real partition) until heal.
type linkProxy struct {
	ln     net.Listener
	target string // host:port of the NATS server

	mu      sync.Mutex
	refused bool
	conns   []net.Conn
}

// startLinkProxy proxies to the NATS server at url (nats://host:port)
// until the test ends.
func startLinkProxy(t *testing.T, url string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: url[len("nats://"):]}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

// URL is the address the proxied node joins with.
func (p *linkProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *linkProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refused := p.refused
		if !refused {
			p.conns = append(p.conns, c)
		}
		p.mu.Unlock()
		if refused {
			_ = c.Close()
			continue
		}
		go p.pipe(c)
	}
}

// pipe carries c's bytes to the server and back until either side ends.
func (p *linkProxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, s)
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = s.Close()
}

// cut drops the node's connection and refuses new ones until heal.
func (p *linkProxy) cut() {
	p.mu.Lock()
	p.refused = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// heal lets the node connect again.
func (p *linkProxy) heal() {
	p.mu.Lock()
	p.refused = false
	p.mu.Unlock()
}
