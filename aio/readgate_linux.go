//go:build linux && !poll_opt

package aio

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"syscall"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/netpoll"
)

// gnet v2.10.0 has no call to stop polling a connection for input: its
// event loop reads a readable socket into the connection's inbound buffer
// whatever the handler does with the bytes. A readGate does it underneath
// gnet. It finds the epoll descriptor of the connection's event loop by
// read-only reflection (conn.loop.poller.fd, checked against the layout of
// gnet's default epoll poller; nothing is written through reflection) and
// changes the events registered for the connection's descriptor with
// epoll_ctl(EPOLL_CTL_MOD), exactly as gnet's own ModRead/ModReadWrite do.
//
// Why this is safe:
//   - gnet's default poller registers a connection level-triggered with its
//     descriptor as the event data, and looks connections up by
//     descriptor; the gate keeps both. (The poll_opt build, whose poller
//     stores a pointer in the event data, gets readgate_other.go.)
//   - The gate is only used on the connection's event loop, inside gnet's
//     callbacks for that open connection, so its changes are ordered with
//     gnet's own and the descriptor cannot have been closed or reused.
//   - gnet itself switches a connection between IN and IN|OUT as its
//     outbound buffer fills and drains. The gate keeps OUT exactly when
//     gnet's outbound buffer holds bytes, and a connection that must wait
//     re-applies the stop after every callback in which gnet may have armed
//     reading again, so at most one read buffer slips in per output drain.
//   - With neither IN nor OUT registered, epoll still reports errors and
//     hang-ups, which gnet handles by closing the connection; a peer's FIN
//     stays in the kernel until reading resumes, after the bytes before it.
type readGate struct {
	epfd, fd int
	on       bool // false (the zero value): unavailable
}

// readGateBuilt says whether this build can stop reading sockets.
const readGateBuilt = true

// gnetLayout holds the reflection paths to a loop's epoll descriptor,
// probed once from the first connection.
var gnetLayout struct {
	once     sync.Once
	connType reflect.Type
	loop     []int // conn → *eventloop
	poller   []int // eventloop → *netpoll.Poller
	epfd     []int // netpoll.Poller → fd
	err      error
}

func probeGnetLayout(t reflect.Type) error {
	field := func(st reflect.Type, name string, want reflect.Kind) (reflect.StructField, error) {
		f, ok := st.FieldByName(name)
		if !ok || f.Type.Kind() != want {
			return f, fmt.Errorf("aio: gnet %s has no %s field of kind %v", st, name, want)
		}
		return f, nil
	}
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct ||
		t.Elem().PkgPath() != "github.com/panjf2000/gnet/v2" || t.Elem().Name() != "conn" {
		return fmt.Errorf("aio: unexpected gnet connection type %v", t)
	}
	loop, err := field(t.Elem(), "loop", reflect.Pointer)
	if err != nil {
		return err
	}
	lt := loop.Type.Elem()
	if lt.Kind() != reflect.Struct || lt.Name() != "eventloop" {
		return fmt.Errorf("aio: unexpected gnet event loop type %v", loop.Type)
	}
	poller, err := field(lt, "poller", reflect.Pointer)
	if err != nil {
		return err
	}
	if poller.Type != reflect.TypeFor[*netpoll.Poller]() {
		return fmt.Errorf("aio: unexpected gnet poller type %v", poller.Type)
	}
	pt := poller.Type.Elem()
	fd, err := field(pt, "fd", reflect.Int)
	if err != nil {
		return err
	}
	// The default epoll poller has an eventfd descriptor "efd"; the
	// poll_opt one keeps a pointer there instead and stores pointers in the
	// event data, which the gate must not overwrite.
	if _, err := field(pt, "efd", reflect.Int); err != nil {
		return err
	}
	gnetLayout.connType = t
	gnetLayout.loop = loop.Index
	gnetLayout.poller = poller.Index
	gnetLayout.epfd = fd.Index
	return nil
}

// newReadGate returns the gate of gc, or an unavailable one.
func newReadGate(gc gnet.Conn) readGate {
	v := reflect.ValueOf(gc)
	if t := v.Type(); t.Kind() != reflect.Pointer || t.Elem().PkgPath() != "github.com/panjf2000/gnet/v2" {
		return readGate{} // not gnet's (a test double): nothing to probe
	}
	gnetLayout.once.Do(func() { gnetLayout.err = probeGnetLayout(v.Type()) })
	if gnetLayout.err != nil || v.Type() != gnetLayout.connType || v.IsNil() {
		return readGate{}
	}
	loop := v.Elem().FieldByIndex(gnetLayout.loop)
	if loop.IsNil() {
		return readGate{}
	}
	p := loop.Elem().FieldByIndex(gnetLayout.poller)
	if p.IsNil() {
		return readGate{}
	}
	epfd := int(p.Elem().FieldByIndex(gnetLayout.epfd).Int())
	fd := gc.Fd()
	if epfd < 0 || fd < 0 {
		return readGate{}
	}
	return readGate{epfd: epfd, fd: fd, on: true}
}

// gateError says why a connection's gate is unavailable (after
// newReadGate).
func gateError() error {
	if gnetLayout.err != nil {
		return gnetLayout.err
	}
	return errors.New("aio: gnet connection without an epoll poller")
}

func (g readGate) ok() bool { return g.on }

// set registers the connection for input (read) and output (write) events.
// Event loop only.
func (g readGate) set(read, write bool) error {
	var ev uint32
	if read {
		ev |= netpoll.ReadEvents
	}
	if write {
		ev |= netpoll.WriteEvents
	}
	err := syscall.EpollCtl(g.epfd, syscall.EPOLL_CTL_MOD, g.fd, &syscall.EpollEvent{Events: ev, Fd: int32(g.fd)})
	if err != nil {
		return fmt.Errorf("aio: epoll_ctl: %w", err)
	}
	return nil
}
