package aio

import (
	"net"
	"testing"

	"github.com/panjf2000/gnet/v2"

	"github.com/sandstorm-go/sandstorm/sink"
)

// fakeGnetConn is just enough of a gnet.Conn for OnOpen. Its address
// methods, which attaching calls, run a hook: a test can look at the engine
// in the middle of OnOpen.
type fakeGnetConn struct {
	gnet.Conn // nil: any other method panics
	ctx       any
	onAddr    func()
}

func (f *fakeGnetConn) Context() any                  { return f.ctx }
func (f *fakeGnetConn) SetContext(v any)              { f.ctx = v }
func (f *fakeGnetConn) Fd() int                       { return -1 }
func (f *fakeGnetConn) Wake(gnet.AsyncCallback) error { return nil }
func (f *fakeGnetConn) EventLoop() gnet.EventLoop     { return nil }
func (f *fakeGnetConn) LocalAddr() net.Addr {
	f.onAddr()
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
}
func (f *fakeGnetConn) RemoteAddr() net.Addr {
	f.onAddr()
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}
}

// TestOnOpenAttachesBeforePublishing checks that OnOpen puts a connection
// in the engine's table (where Connections, closeIdle and Close find it
// and call its gnet connection) only once it is attached to it.
func TestOnOpenAttachesBeforePublishing(t *testing.T) {
	for _, client := range []bool{false, true} {
		name := "server"
		if client {
			name = "client"
		}
		t.Run(name, func(t *testing.T) {
			e := newEngine(SocketConfig{InboundPolicy: InboundClose}.withDefaults(), Env{}.withDefaults(), "t")
			owner := newRecorder("owner")
			fc := &fakeGnetConn{}
			if client {
				fc.ctx = newConnection(e, owner, nil)
			} else {
				e.server = &Server{sink: owner, eng: e}
			}
			fc.onAddr = func() {
				if n := e.open(); n != 0 {
					t.Errorf("%d connection(s) in the table while still being attached", n)
				}
			}
			if _, act := e.OnOpen(fc); act != gnet.None {
				t.Fatalf("OnOpen: action %v", act)
			}
			conns := e.snapshot()
			if len(conns) != 1 {
				t.Fatalf("%d connections in the table after OnOpen, want 1", len(conns))
			}
			c := conns[0]
			if c.gc != gnet.Conn(fc) || c.RemoteAddr() == nil || c.LocalAddr() == nil {
				t.Fatal("connection in the table is not attached")
			}
			evs := owner.wait(t, "the connection", func(evs []sink.Event) bool { return count[*Connection](evs) == 1 })
			if got, _ := first[*Connection](evs); got != c {
				t.Fatal("a different connection was delivered")
			}
		})
	}
}
