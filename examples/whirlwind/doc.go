// Package whirlwind simulates the HTTP server of Whirlwind (Donald & Ghosh,
// "Whirlwind: Overload protection, fault-tolerance and self-tuning in an
// Internet services platform", §IV and Fig. 1) as a Sandstorm stage graph
// wired in YAML (Config): SocketConnection, HttpConnection, Dispatcher,
// FileHandler and AsyncFile. Requests are simulated as events; there are no
// sockets.
//
// It shows the Whirlwind mechanisms on the SEDA runtime:
//
//   - Processes: SocketConnection and HttpConnection handle the events of
//     one connection one at a time (keyed ordering), so HttpConnection
//     keeps per-connection state without locks and answers pipelined
//     requests in order; AsyncFile serializes the requests of one file.
//   - Principals: every event carries its session (enqueuepred.Principal),
//     used by the Dispatcher's session-consistent predicate and its
//     priority scheduler (admins first).
//   - Message predicates (Fig. 1b): the file handler group's cost predicate
//     refuses the full-quality request under load and accepts the
//     low-quality one; when both are refused, the Dispatcher answers 503
//     and closes the connection.
//   - Fault containment and supervision: the file stages name the requests
//     they fail (stage.EventError); the Dispatcher monitors them and
//     answers 500 for exactly those requests (or for a whole batch whose
//     handler panicked), while their supervisor restarts them; queued
//     requests are kept.
package whirlwind
