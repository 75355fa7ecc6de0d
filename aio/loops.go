package aio

import (
	"errors"
	"net"
	"runtime"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

// eventLoops are a socket's event loops: one gnet client engine of one
// event loop each, so that aio chooses the loop a connection joins. It
// hands connections to the loops in turn.
//
// One gnet client engine with several loops would choose for itself, and
// it ignores WithLoadBalancing: its Client always uses least connections,
// where a loop's count goes up only once the loop has registered the
// connection. Connections that arrive together (a load generator's 64
// dials, a browser's six) all see the same counts and pile onto one loop:
// 64 simultaneous dials were split 15/49 over two loops, and one core
// served three quarters of the requests while the other idled. In turn,
// the same 64 are split 32/32.
type eventLoops struct {
	clients []*gnet.Client
	next    atomic.Uint64
}

// startEventLoops starts the event loops e's configuration asks for (one
// per CPU when EventLoops is 0), each calling e's handlers.
func startEventLoops(e *engine) (*eventLoops, error) {
	n := e.cfg.EventLoops
	if n <= 0 {
		n = runtime.NumCPU()
	}
	opts := append(e.gnetOptions(), gnet.WithNumEventLoop(1))
	l := &eventLoops{}
	for range n {
		cli, err := gnet.NewClient(e, opts...)
		if err == nil {
			err = cli.Start()
		}
		if err != nil {
			return nil, errors.Join(err, l.stop())
		}
		l.clients = append(l.clients, cli)
	}
	return l, nil
}

// enroll hands nc to the next event loop in turn (see
// gnet.Client.EnrollContext: it duplicates nc's descriptor, closes nc and
// returns once the loop ran OnOpen, with ctx as the connection's context).
func (l *eventLoops) enroll(nc net.Conn, ctx any) (gnet.Conn, error) {
	i := (l.next.Add(1) - 1) % uint64(len(l.clients))
	return l.clients[i].EnrollContext(nc, ctx)
}

// stop stops every event loop and waits for them.
func (l *eventLoops) stop() error {
	var errs []error
	for _, cli := range l.clients {
		errs = append(errs, cli.Stop())
	}
	return errors.Join(errs...)
}
