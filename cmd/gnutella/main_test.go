package main

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
)

// The command with the embedded configuration: the handshake, and a Ping
// broadcast to the other peer and answered with a Pong.
func TestServe(t *testing.T) {
	addrs := make(chan string, 1)
	stops := make(chan func(), 1)
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"-addr", "127.0.0.1:0", "-query-delay", "1ms"}, func(a string, stop func()) {
			addrs <- a
			stops <- stop
		})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case code := <-done:
		t.Fatalf("exited with %d", code)
	}
	stop := <-stops
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, gnutella.Connect)
		r := bufio.NewReader(c)
		ok := make([]byte, len(gnutella.OK))
		if _, err := io.ReadFull(r, ok); err != nil || string(ok) != gnutella.OK {
			t.Fatalf("handshake %q %v", ok, err)
		}
		return c, r
	}
	a, ar := dial()
	b, br := dial()
	defer a.Close()
	defer b.Close()
	read := func(r *bufio.Reader) gnutella.Descriptor {
		buf := make([]byte, gnutella.HeaderLen)
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
		h, _ := gnutella.ParseHeader(buf)
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatal(err)
		}
		return gnutella.Descriptor{Header: h, Payload: p}
	}
	// B may not be listed as a peer yet when A's Ping is routed: retry
	// with fresh IDs until B sees one.
	for i := byte(1); ; i++ {
		d := gnutella.Descriptor{Header: gnutella.Header{ID: gnutella.ID{i}, Type: gnutella.TypePing, TTL: 2}}
		a.Write(d.Bytes())
		if pong := read(ar); pong.Type != gnutella.TypePong || pong.ID != d.ID {
			t.Fatalf("got %s", pong.Type)
		}
		b.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		buf := make([]byte, gnutella.HeaderLen)
		if _, err := io.ReadFull(br, buf); err == nil {
			if h, _ := gnutella.ParseHeader(buf); h.Type != gnutella.TypePing || h.Hops != 1 {
				t.Fatalf("B got %+v", h)
			}
			break
		}
		if i == 100 {
			t.Fatal("B never got a Ping")
		}
	}
	stop()
	// stop only cancels the signal context; send ourselves nothing: the
	// command returns once the context is done.
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
}
