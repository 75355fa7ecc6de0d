// Package gnutella is the Gnutella 0.4 packet router of the SEDA thesis
// (chapter 6 §2) as Sandstorm stages on the aio socket layer.
//
// Use it first through cmd/gnutella, or from Go: New a Node, Register its
// handlers in a stage.Registry, build a manager from configs/gnutella.yaml
// (stage.NewFromConfig), Start it, and call Node.Shutdown before the
// manager's Shutdown. The stages, as in the thesis:
//
//   - GnutellaServer (gnutella.Server, one goroutine) opens the socket,
//     accepts connections and takes over those GnutellaCatcher opened,
//     runs the handshake ("GNUTELLA CONNECT/0.4\n\n" → "GNUTELLA OK\n\n")
//     and parses descriptors into Arrival events for the router. A peer
//     with a bad handshake or a malformed, unknown or oversized descriptor
//     is closed and counted (Stats.BadPeers); past `maxPeers` connected
//     peers a new one is closed at its handshake (Stats.Rejected). A descriptor the router's
//     queue refuses is dropped and counted (Stats.Dropped): Gnutella is
//     lossy.
//   - GnutellaRouter (gnutella.Router, any number of goroutines; the
//     thread-pool controller sizes it) routes: Ping and Query are
//     broadcast once to every peer but the one they came from (an ID
//     already routed is a duplicate, dropped), with TTL decremented and
//     hops incremented, and nothing is forwarded whose TTL reaches 0;
//     Pong and QueryHit go back to the peer their Ping or Query came from,
//     Push to the peer the QueryHit with its servent ID came from. Its
//     three routing tables are bounded in size and age (`routes:` args).
//     It answers each Ping with a Pong for this node, and its `queryDelay`
//     arg is the thesis's deliberate bottleneck (§2.3: 20 ms per Query).
//     What one batch sends to a peer is written to it at once (one aio
//     write, one system call), flushed before a Query's delay.
//   - GnutellaCatcher (gnutella.Catcher, optional) keeps a host cache (its
//     `hosts` and those Pongs advertise) and keeps `connections` outgoing
//     connections open, pinging the network every `pingEvery`.
//
// Slow peers (thesis §6.2.2): the router writes each descriptor to its
// peers' aio connections, whose unsent output is bounded by the socket's
// writeThreshold; with clogPolicy close a peer that falls behind is closed
// (Stats.SlowClosed) instead of holding memory without bound.
//
// The codec is usable on its own: Decode and Descriptor.AppendTo for the
// 23-byte descriptor header and its payload, Parser for a connection's
// byte stream (it holds at most one partial descriptor: a payload above
// MaxPayload is ErrTooLarge as soon as its header arrives), Handshake, and
// Pong, Query, QueryHit and Push for the payloads.
//
// What it does not do: the 0.6 handshake (headers, Ultrapeers), GGEP or
// HUGE extensions (bytes after a Query's search string or between a
// QueryHit's results and its servent ID are accepted and forwarded as
// they are), file transfer, and sharing files: the router answers no
// Query itself. The stage graph the profiler draws shows the sockets as
// "outside": aio's connections are sinks, not stages.
package gnutella
