// Package gnutella is the Gnutella 0.4 packet router of the SEDA thesis
// (chapter 6 §2) as Sandstorm stages on the aio socket layer.
//
// Start with New and Node.Register, then build a manager from
// configs/gnutella.yaml (cmd/gnutella does exactly that). The codec is
// usable on its own: Decode and Descriptor.AppendTo for the 23-byte
// descriptor header and its payload, Parser for a connection's byte
// stream (bounded: a payload above MaxPayload is ErrTooLarge as soon as
// its header arrives), Handshake for the "GNUTELLA CONNECT/0.4\n\n" →
// "GNUTELLA OK\n\n" exchange, and Pong, Query, QueryHit and Push for the
// payloads.
//
// What it does not do: the 0.6 handshake (headers, Ultrapeers), GGEP or
// HUGE extensions (bytes after a Query's search string or between a
// QueryHit's results and its servent ID are accepted and forwarded as
// they are), file transfer, and sharing files: the router answers no
// Query itself.
package gnutella
