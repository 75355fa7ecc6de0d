//go:build !linux || poll_opt

package aio

import (
	"errors"

	"github.com/panjf2000/gnet/v2"
)

// readGate would stop gnet polling a connection for input; it is only
// implemented for gnet's default epoll poller (readgate_linux.go). Here
// InboundPause falls back to InboundClose's MaxInbound bound.
type readGate struct{}

// readGateBuilt says whether this build can stop reading sockets.
const readGateBuilt = false

func newReadGate(gnet.Conn) readGate { return readGate{} }

func gateError() error {
	return errors.New("aio: stopping a socket's reading needs gnet's default epoll poller (Linux, no poll_opt)")
}

func (readGate) ok() bool { return false }

func (readGate) set(read, write bool) error { return gateError() }
