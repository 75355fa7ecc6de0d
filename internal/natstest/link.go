package natstest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// Link is a TCP proxy on loopback between one node and its NATS server,
// so that a test can cut that node alone off NATS (a partition): Cut
// closes the node's connection and refuses its reconnections (the node
// keeps trying, as it would across a real partition) until Heal.
//
//	link := natstest.NewLink(t, srv.URL())
//	... join the node to link.URL() ...
//	link.Cut()  // the node's NATS connection drops; it cannot reconnect
//	link.Heal() // it reconnects on its own
type Link struct {
	ln     net.Listener
	target string // host:port of the NATS server

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// NewLink proxies to the NATS server at url (nats://host:port) until the
// test ends.
func NewLink(t testing.TB, url string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{ln: ln, target: strings.TrimPrefix(url, "nats://")}
	t.Cleanup(func() {
		_ = ln.Close()
		l.Cut()
	})
	go l.serve()
	return l
}

// URL is the address the proxied node joins with.
func (l *Link) URL() string { return "nats://" + l.ln.Addr().String() }

func (l *Link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		if l.isCut() {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l.mu.Lock()
		if l.cut { // cut while dialling
			l.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			continue
		}
		l.conns = append(l.conns, c, s)
		l.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	}
}

func (l *Link) isCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

// Cut closes every connection through the link and refuses new ones
// until Heal.
func (l *Link) Cut() {
	l.mu.Lock()
	l.cut = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Heal lets connections through again.
func (l *Link) Heal() {
	l.mu.Lock()
	l.cut = false
	l.mu.Unlock()
}
