// Package aio is Sandstorm's asynchronous I/O layer (thesis chapter 5 §6):
// sockets on gnet event loops and files on a wrapped blocking stage, both
// speaking events to application sinks.
//
// Start with Listen (a server socket delivering connection and packet
// events to a sink) or Files (the asynchronous file stage); their YAML
// block is global.aio.
//
// # Sockets
//
// Listen opens a server socket. Its sink receives ListenSucceeded (or
// ListenFailed), one *Connection per accepted connection, and ServerClosed
// when it stops. NewClient and Client.Connect make outgoing connections,
// delivered as *Connection or ConnectFailed.
//
// A *Connection is a sink.Sink of outgoing buffers: enqueue []byte,
// WriteRequest (with an optional Done sink that receives SinkDrained once
// the bytes are written to the kernel, or WriteFailed) or CloseRequest.
// StartReader(s) delivers incoming bytes to s as Packet events (a private
// copy, with the connection and a per-connection sequence number), and
// SinkClosed exactly once when the connection closes, after its last
// packet; a reader that is a PacketReceiver is handed each packet by
// value instead, while nothing waits before it (no event allocated).
// SinkClogged reports a connection whose unsent output passed its
// WriteThreshold: the write is refused (sink.ErrRejected, ErrClogged) and,
// under ClogClose, the slow peer is closed (thesis ch. 6 §2.2). Close sends
// everything queued first; Abort does not.
//
// The Connection owns its output. A protocol that bounds what it queues
// (an HTTP connection, by its pipeline) uses Connection.Write: ordered,
// never refused for the threshold, completion by a plain function. Bytes
// are handed to the event loop only within WriteWindow per connection and
// OutputBudget per socket (the rest waits by reference, not copied), and
// WriteTimeout closes a peer whose output does not move. Linger is the
// lingering close of RFC 9112 §9.6 (FIN, then input discarded until the
// peer closes or LingerTimeout); SetTimer gives a protocol its deadlines
// (TimerExpired) on the socket's maintenance goroutine. Events go to a
// Receiver: a stage's sink, or a plain function (Func), which is a
// callback and not a sink.
//
// # How gnet's limits are handled
//
//   - Nothing blocks in a gnet callback. Deliveries use non-blocking
//     enqueues; an event a sink rejects waits, in order, in the
//     connection's postbox, and a goroutine per socket (the maintenance
//     loop) retries it after PollInterval, backing off to 16 intervals
//     while the sink keeps rejecting. The maintenance loop sleeps until the
//     next connection is due, so an idle socket costs nothing.
//   - gnet reads every readable socket into its inbound buffer and has no
//     call to pause one. When a reader sink rejects a packet (or the
//     read-rate governor says wait, or no reader has started) the
//     connection stops taking bytes out of gnet's buffer, so nothing is
//     lost, and, with InboundPause (the default), also stops reading the
//     socket: it removes its descriptor's input events from the event
//     loop's epoll set, underneath gnet, until delivery goes on. The bytes
//     then wait in the kernel and TCP flow control holds the peer back.
//     With InboundClose (or where stopping is impossible, counted in
//     SocketStats.PauseUnsupported) gnet keeps reading, and MaxInbound
//     bounds its buffer: a peer that keeps sending into a paused connection
//     is closed (ClosedOverflow), and the bytes it had sent are still
//     delivered before SinkClosed.
//   - gnet's outbound buffer is unbounded, so the write threshold bounds
//     it. gnet has no "drained" callback: completions are found by reading
//     OutboundBuffered after each write and, while someone waits, by waking
//     the connection onto its event loop every PollInterval (backing off to
//     32 intervals while the output does not move).
//   - gnet drops unsent output on Close, so Connection.Close waits until the
//     outbound buffer is empty (bounded by CloseTimeout).
//   - gnet has no deadlines: IdleTimeout is enforced by the maintenance
//     loop.
//   - gnet stops its whole engine when accept(2) fails (EMFILE, ENFILE), so
//     a Server accepts on its own goroutine(s) and hands connections to
//     gnet client engines; a failed accept is counted, logged once per
//     burst and retried after a back-off. gnet duplicates the descriptor
//     it is handed, so an accepted connection waits (counted as a failed
//     accept) until a descriptor is free rather than being reset.
//     SuspendAccept closes new connections at once while suspended;
//     MaxConnections closes those beyond the limit right after accept.
//   - gnet's client engine picks a loop by least connections counted only
//     once a loop has registered one, so a burst of connections piles onto
//     one loop. Each event loop is therefore a gnet client engine of its
//     own, and aio hands connections to them in turn.
//   - gnet closes a connection when the peer half-closes (EOF), so a peer
//     that shuts down its write side cannot receive a reply afterwards;
//     the bytes it sent are still delivered.
//   - gnet calls on a connection after its engine stopped could write to a
//     recycled descriptor, so every call into gnet happens under the
//     connection's lock while it is not closed, and OnClose (which gnet
//     runs for every connection before it closes its pollers) marks it
//     closed.
//
// Each Server and Client owns its gnet engine and maintenance goroutine;
// Close (abrupt) and Shutdown (graceful, like http.Server.Shutdown) wait
// for them. A server given a stage.Manager stops accepting when the manager
// raises stage.SignalShutdownStarted, and its counters (SocketStats) are
// registered in the manager's metrics registry as "aio.<socket>.<name>".
//
// # Files
//
// FileIO (Sandstorm's asyncFileIO) turns Open, Read, Write, SeekTo, Stat,
// Flush and Close into requests to one stage ("aio.file") whose thread pool
// the thread-pool controller sizes. Requests on one File run one at a time
// in order (the File is queued on the stage only while its own FIFO has
// work, so one worker at a time has it); different files proceed in
// parallel. Completions (IOCompleted, EOF, IOError) go to the File's sink.
// ReadFile reads a whole file in one request (FileRead).
//
// # Configuration
//
// SocketConfig and FileConfig have zero-value defaults and YAML tags.
// ConfigOf decodes a manager's `global.aio` block: socket defaults, named
// sockets under `sockets:`, and `file:`.
package aio
