package aio

import (
	"errors"
	"net"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Errors. Events and returned errors wrap them; test with errors.Is.
var (
	// ErrClogged is wrapped (with sink.ErrRejected) by the error a write
	// gets when it would push its connection past the write threshold.
	ErrClogged = errors.New("aio: connection clogged")
	// ErrConnClosed is wrapped by WriteFailed.Err for bytes a closed
	// connection could not send, and (with sink.ErrClosed) by the error a
	// write gets after Close.
	ErrConnClosed = errors.New("aio: connection closed")
	// ErrIdleTimeout: the connection was idle for longer than IdleTimeout.
	ErrIdleTimeout = errors.New("aio: idle timeout")
	// ErrCloseTimeout: a graceful close could not drain the output within
	// CloseTimeout; the rest was dropped.
	ErrCloseTimeout = errors.New("aio: close timed out before output drained")
	// ErrInboundOverflow: more than MaxInbound unread bytes piled up while
	// reading was paused.
	ErrInboundOverflow = errors.New("aio: unread inbound bytes exceed limit")
	// ErrSocketClosed: the server or client socket was closed.
	ErrSocketClosed = errors.New("aio: socket closed")
	// ErrWriteTimeout: the connection had output to send and none of it
	// was written for WriteTimeout (a peer that stopped reading).
	ErrWriteTimeout = errors.New("aio: write timeout")
	// ErrBadEvent: a connection was given an event it cannot write.
	ErrBadEvent = errors.New("aio: unsupported event")
	// ErrReaderStarted: StartReader was called twice.
	ErrReaderStarted = errors.New("aio: reader already started")
)

// Receiver is where a socket or a file delivers its events: a stage's
// sink (every sink.Sink is a Receiver), or a plain function (Func) for an
// application that handles them inline. A Receiver that returns an error
// wrapping sink.ErrRejected (and not sink.ErrClosed) is retried later, and
// delivery to it pauses meanwhile.
type Receiver interface {
	Enqueue(e sink.Event) error
}

// PacketReceiver is a Receiver that also takes a connection's packets by
// value: the socket calls ReceivePacket, on the goroutine that delivers,
// with each packet that nothing waits before, instead of boxing it into a
// sink.Event for Enqueue (one allocation fewer per packet). A packet it
// refuses with a rejection waits, with the ones after it, and is offered
// again later through Enqueue as a Packet event, as to any Receiver.
type PacketReceiver interface {
	Receiver
	ReceivePacket(p Packet) error
}

// PacketBorrower is a PacketReceiver that can also take packets whose
// Data is only lent: BorrowPacket is called on the event loop with a view
// of the loop's read buffer (on a TLS connection, of the record buffer
// the plaintext was decrypted into), which is reused once it returns, so
// that reading allocates nothing per packet. It must copy whatever of Data it keeps after it returns. A
// packet it refuses, or one that must wait because something waits
// before it, is copied by the socket first and then waits and is offered
// again through Enqueue as a Packet event whose Data it owns, as to any
// Receiver.
type PacketBorrower interface {
	PacketReceiver
	BorrowPacket(p Packet) error
}

// Func is a Receiver that calls a function with each event, on the
// goroutine that delivers it (an event loop, or a socket's maintenance
// goroutine). It must not block. Func is a callback, not a queue: it is
// not a sink.Sink.
type Func func(e sink.Event) error

// Enqueue calls f.
func (f Func) Enqueue(e sink.Event) error { return f(e) }

// Packet is a chunk of bytes received on a connection, delivered to the
// connection's reader sink. Data is the packet's own copy. Seq numbers a
// connection's packets 1, 2, 3… in arrival order.
type Packet struct {
	Conn *Connection
	Seq  uint64
	Data []byte
	// At is the sink.Nanotime reading taken when the bytes arrived (one
	// per event-loop visit, shared by its packets): a reader may use it
	// instead of reading the clock again. 0 when unknown.
	At int64
}

// WriteRequest is an outgoing buffer with options. Enqueue a WriteRequest
// (or a plain []byte) on a Connection. Data is sent first, then Bufs, with
// one writev. The slices must not be modified until the request completes.
type WriteRequest struct {
	Data []byte
	Bufs [][]byte
	// Done, if set, receives SinkDrained once every byte of this request
	// (and of every earlier one) has been written to the kernel, or
	// WriteFailed if the connection closes first.
	Done Receiver
	// Tag is handed back in the completion event.
	Tag any
}

// CloseRequest, enqueued on a Connection, closes it once every byte queued
// before it has been sent (like Connection.Close).
type CloseRequest struct{}

// SinkDrained completes a WriteRequest (or a Flush): its bytes, and all
// earlier ones, have left for the network.
type SinkDrained struct {
	Conn  *Connection
	Tag   any
	Bytes int // bytes in the request (0 for a Flush)
}

// WriteFailed completes a WriteRequest whose bytes were not all sent because
// the connection closed first. Err wraps ErrConnClosed.
type WriteFailed struct {
	Conn  *Connection
	Tag   any
	Bytes int
	Err   error
}

// SinkClogged reports that a write was refused because the connection's
// outstanding output passed its threshold: the peer reads too slowly. It is
// delivered once per episode (the episode ends when outstanding output falls
// back to half the threshold), to the connection's event sink.
type SinkClogged struct {
	Conn        *Connection
	Outstanding int64 // unsent bytes at the refusal
	Writes      int   // uncompleted write requests at the refusal
	Refused     int   // size of the refused write
}

// CloseReason says why a connection closed.
type CloseReason int

// Close reasons.
const (
	ClosedLocal        CloseReason = iota + 1 // Close or Abort was called
	ClosedPeer                                // the peer closed (EOF)
	ClosedError                               // a socket error
	ClosedIdle                                // IdleTimeout passed
	ClosedClogged                             // ClogClose policy
	ClosedOverflow                            // MaxInbound passed
	ClosedShutdown                            // the socket (server or client) closed
	ClosedWriteTimeout                        // WriteTimeout passed
)

func (r CloseReason) String() string {
	switch r {
	case ClosedLocal:
		return "local"
	case ClosedPeer:
		return "peer"
	case ClosedError:
		return "error"
	case ClosedIdle:
		return "idle"
	case ClosedClogged:
		return "clogged"
	case ClosedOverflow:
		return "overflow"
	case ClosedShutdown:
		return "shutdown"
	case ClosedWriteTimeout:
		return "write timeout"
	}
	return "unknown"
}

// SinkClosed reports that a connection closed. Every connection delivers it
// exactly once, after its last Packet: to its reader sink, or, if reading
// never started, to the sink that received the Connection.
type SinkClosed struct {
	Conn   *Connection
	Reason CloseReason
	// Err is the cause: nil for a plain local close, io.EOF (wrapped) when
	// the peer closed, or one of ErrIdleTimeout, ErrClogged,
	// ErrInboundOverflow, ErrCloseTimeout, ErrSocketClosed, a socket error.
	Err error
	// Unsent is the number of accepted bytes not known to have been
	// written when the connection closed.
	Unsent int64
	// Unread is the number of received bytes no reader took, because the
	// connection was closed locally before StartReader.
	Unread int64
}

// TimerExpired is delivered to a connection's event receiver when the
// time given to SetTimer has come.
type TimerExpired struct {
	Conn *Connection
}

// ListenSucceeded is delivered to a server's sink when it is listening.
type ListenSucceeded struct {
	Server *Server
	Addr   net.Addr
}

// ListenFailed is delivered to a server's sink when it cannot listen.
type ListenFailed struct {
	Addr string
	Err  error
}

// ServerClosed is delivered to a server's sink when it stops, after the
// SinkClosed of its connections. Err is nil after Close or Shutdown.
type ServerClosed struct {
	Server *Server
	Err    error
}

// ConnectFailed is delivered to a Connect's sink when the connection could
// not be made. Value is the value given to Connect.
type ConnectFailed struct {
	Addr  string
	Value any
	Err   error
}
