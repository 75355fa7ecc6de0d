package aio

import (
	"net"
	"testing"
	"unsafe"

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

// TestCloneAddrCopiesZones: a TCP address with a zone is copied (gnet
// gives the zone's bytes to its buffer pool when the connection closes),
// one without is kept as net made it, a Unix address is copied.
func TestCloneAddrCopiesZones(t *testing.T) {
	plain := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}
	if got := cloneAddr(plain); got != net.Addr(plain) {
		t.Fatalf("an address without a zone was copied: %p, want %p", got, plain)
	}
	zoned := &net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "eth0"}
	got, ok := cloneAddr(zoned).(*net.TCPAddr)
	if !ok || got == zoned || got.String() != zoned.String() {
		t.Fatalf("zoned address: %#v, want a copy of %v", got, zoned)
	}
	if unsafe.StringData(got.Zone) == unsafe.StringData(zoned.Zone) {
		t.Fatal("the copy's zone shares the original's bytes")
	}
	zoned.IP[15] = 2 // what a reuse of the original's memory would do
	if got.String() != "[fe80::1%eth0]:80" {
		t.Fatalf("the copy shares the original's IP: %v", got)
	}
	unix := &net.UnixAddr{Name: "/tmp/s", Net: "unix"}
	if u, ok := cloneAddr(unix).(*net.UnixAddr); !ok || u == unix || *u != *unix {
		t.Fatalf("unix address: %#v, want a copy of %v", u, unix)
	}
	if cloneAddr(nil) != nil {
		t.Fatal("nil address not kept nil")
	}
}
