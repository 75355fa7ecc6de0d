package gnutella_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
	"github.com/sandstorm-go/sandstorm/stage"
)

// testConfig is a router with one routing thread (FIFO, so a marker sent
// after a descriptor arrives after everything it caused) on a free port.
const testConfig = `
global:
  threadpool: {min: 1, max: 1, controller: {enabled: false}}
  batching: {max: 16}
  aio:
    eventLoops: 1
    writeThreshold: {bytes: WRITEBYTES, writes: 10000}
    clogPolicy: close
    sockets:
      gnutella: {addr: "127.0.0.1:0"}
stages:
  GnutellaServer:
    handler: gnutella.Server
    args: {maxPayload: 40000, maxPeers: 6}
  GnutellaRouter:
    handler: gnutella.Router
    args: {maxTTL: 7, routes: {size: 1000, age: 1m}}
`

// liveRouters counts the routers a test runs (tests are sequential);
// goroutinesBefore is the count before the first started.
var liveRouters, goroutinesBefore int

type router struct {
	node *gnutella.Node
	m    *stage.Manager
	addr string
}

func startRouter(t testing.TB, writeBytes string, extra string) *router {
	t.Helper()
	if writeBytes == "" {
		writeBytes = "1MiB"
	}
	if liveRouters == 0 {
		goroutinesBefore = runtime.NumGoroutine()
	}
	liveRouters++
	cfgText := strings.Replace(testConfig, "WRITEBYTES", writeBytes, 1) + extra
	node := gnutella.New(gnutella.Options{})
	reg := stage.NewRegistry()
	node.Register(reg)
	cfg, err := stage.ParseConfig([]byte(cfgText), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := stage.NewFromConfig(cfg, reg, stage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := &router{node: node, m: m, addr: node.Addr().String()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := node.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := m.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		// When the last router of a test stops, every goroutine the
		// routers started is gone (the wait only bounds a leak's report).
		liveRouters--
		if liveRouters > 0 {
			return
		}
		base := goroutinesBefore
		for runtime.NumGoroutine() > base {
			if ctx.Err() != nil {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines left, %d before the router:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	return r
}

// peer is a simulated servent on a plain net.Conn.
type peer struct {
	t    *testing.T
	name string
	c    net.Conn
	r    *bufio.Reader
	p    gnutella.Parser
	got  []gnutella.Descriptor
}

func dialPeer(t *testing.T, r *router, name string) *peer {
	t.Helper()
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := &peer{t: t, name: name, c: c, r: bufio.NewReader(c)}
	if _, err := io.WriteString(c, gnutella.Connect); err != nil {
		t.Fatal(err)
	}
	ok := make([]byte, len(gnutella.OK))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(p.r, ok); err != nil || string(ok) != gnutella.OK {
		t.Fatalf("%s: handshake answer %q, %v", name, ok, err)
	}
	return p
}

func (p *peer) send(d gnutella.Descriptor) {
	p.t.Helper()
	if _, err := p.c.Write(d.Bytes()); err != nil {
		p.t.Fatalf("%s: write: %v", p.name, err)
	}
}

// next returns the next descriptor the peer receives (10 s is only a
// bound on a broken test, never what decides it).
func (p *peer) next() gnutella.Descriptor {
	p.t.Helper()
	p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	for len(p.got) == 0 {
		n, err := p.r.Read(buf)
		if n > 0 {
			var perr error
			if p.got, perr = p.p.Feed(buf[:n], p.got); perr != nil {
				p.t.Fatalf("%s: %v", p.name, perr)
			}
		}
		if err != nil && len(p.got) == 0 {
			p.t.Fatalf("%s: read: %v", p.name, err)
		}
	}
	d := p.got[0]
	p.got = p.got[1:]
	return d
}

// expect returns the next descriptor, failing unless it has type typ and ID id.
func (p *peer) expect(typ gnutella.Type, id gnutella.ID) gnutella.Descriptor {
	p.t.Helper()
	d := p.next()
	if d.Type != typ || d.ID != id {
		p.t.Fatalf("%s got %s %s (ttl %d hops %d), want %s %s", p.name, d.Type, d.ID, d.TTL, d.Hops, typ, id)
	}
	return d
}

// closedByRouter reports whether the router closed the connection (EOF or
// reset) after possibly sending some descriptors.
func (p *peer) closedByRouter() bool {
	p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, p.r)
	return err == nil || errors.Is(err, net.ErrClosed) || !errors.Is(err, os.ErrDeadlineExceeded)
}

var seq atomic.Uint32

func newID() gnutella.ID {
	var id gnutella.ID
	n := seq.Add(1)
	id[0], id[1], id[2], id[15] = byte(n), byte(n>>8), byte(n>>16), 0xee
	return id
}

func ping(id gnutella.ID, ttl byte) gnutella.Descriptor {
	return gnutella.Descriptor{Header: gnutella.Header{ID: id, Type: gnutella.TypePing, TTL: ttl}, Payload: []byte{}}
}

func query(id gnutella.ID, ttl byte, search string) gnutella.Descriptor {
	return gnutella.Descriptor{Header: gnutella.Header{ID: id, Type: gnutella.TypeQuery, TTL: ttl},
		Payload: gnutella.Query{Search: search}.Append(nil)}
}

func queryHit(id gnutella.ID, servent gnutella.ID) gnutella.Descriptor {
	return gnutella.Descriptor{Header: gnutella.Header{ID: id, Type: gnutella.TypeQueryHit, TTL: 7},
		Payload: gnutella.QueryHit{ServentID: servent, Results: []gnutella.Result{{Index: 1, Size: 10, Name: "seda.pdf"}}}.Append(nil)}
}

// waitPeers waits until the router lists n peers (the handshake answer is
// queued before the peer is listed).
func (r *router) waitPeers(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(r.node.Peers()) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d peers, want %d", len(r.node.Peers()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func newPlain(t *testing.T, r *router) net.Conn {
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// expectSkipping returns the first descriptor of type typ and ID id,
// skipping the Catchers' Pings in between.
func (p *peer) expectSkipping(typ gnutella.Type, id gnutella.ID) gnutella.Descriptor {
	p.t.Helper()
	for {
		d := p.next()
		if d.Type == typ && d.ID == id {
			return d
		}
		if d.Type != gnutella.TypePing {
			p.t.Fatalf("%s got %s %s, want %s %s", p.name, d.Type, d.ID, typ, id)
		}
	}
}
