package http

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/internal/ring"
	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is HTTP/2 (RFC 9113, DESIGN §13): its configuration and
// counters, the choice of protocol on a connection's first bytes, and the
// connection state. h2_read.go reads frames (the socket's event loop),
// h2_write.go is the output owner (any goroutine that answers), and
// h2_timer.go the timer's visits. Framing and HPACK are
// golang.org/x/net/http2's; the state machine is ours and runs on the
// event loop and the answering goroutines: no goroutine per connection or
// per stream.

// HTTP/2 defaults, used for the zero fields of H2Config.
const (
	DefaultH2MaxConcurrentStreams = 128
	DefaultH2MaxHeaderListSize    = 64 << 10
	DefaultH2MaxContinuations     = 32
	DefaultH2MaxResetsPerSecond   = 200
	DefaultH2MaxControlPerSecond  = 1000
	DefaultH2HeaderTableSize      = 4096
	DefaultH2InitialWindowSize    = 256 << 10
)

// h2Preface is what an HTTP/2 client sends first (RFC 9113 §3.4).
const h2Preface = http2.ClientPreface

// h2FrameSize is the largest frame either side sends or accepts: the
// protocol's minimum maximum, so that no SETTINGS can make us buffer more
// per frame, and DATA frames interleave streams at this grain.
const h2FrameSize = 16384

const h2MaxWindow = 1<<31 - 1

// H2Config configures the HTTP/2 side of a Server (ServerConfig.HTTP2).
// Zero fields take the defaults above. A connection that exceeds one of
// the bounds gets GOAWAY, is closed and is counted in H2Stats.
type H2Config struct {
	// Disable turns HTTP/2 off: a TLS listener offers only http/1.1 by
	// ALPN, and the plain port treats the HTTP/2 preface as a bad
	// HTTP/1.1 request.
	Disable bool
	// MaxConcurrentStreams bounds a connection's streams being served
	// (announced in SETTINGS). A stream over it gets REFUSED_STREAM. A
	// stream the client reset stays counted until the application has
	// answered it, so rapid resets cannot make the server work on more.
	MaxConcurrentStreams int
	// MaxHeaderListSize bounds a request's header list (names, values
	// and 32 bytes per field, RFC 9113 §6.5.2) and its compressed header
	// block.
	MaxHeaderListSize int
	// MaxContinuations bounds the CONTINUATION frames of one header block
	// (CVE-2024-27316).
	MaxContinuations int
	// MaxResetsPerSecond bounds the streams a connection's client resets,
	// or the server refuses or resets for errors, in a second
	// (CVE-2023-44487, rapid reset).
	MaxResetsPerSecond int
	// MaxControlPerSecond bounds the SETTINGS, PING and PRIORITY frames,
	// and the empty DATA and HEADERS frames, a client sends in a second.
	MaxControlPerSecond int
	// HeaderTableSize bounds both HPACK dynamic tables: the client's
	// (announced; a larger size update is a COMPRESSION_ERROR) and ours
	// (whatever the client announces).
	HeaderTableSize uint32
	// InitialWindowSize is each stream's receive window for request
	// bodies (announced in SETTINGS).
	InitialWindowSize int32
}

func (c H2Config) withDefaults() H2Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxConcurrentStreams, DefaultH2MaxConcurrentStreams)
	def(&c.MaxHeaderListSize, DefaultH2MaxHeaderListSize)
	def(&c.MaxContinuations, DefaultH2MaxContinuations)
	def(&c.MaxResetsPerSecond, DefaultH2MaxResetsPerSecond)
	def(&c.MaxControlPerSecond, DefaultH2MaxControlPerSecond)
	if c.HeaderTableSize == 0 {
		c.HeaderTableSize = DefaultH2HeaderTableSize
	}
	if c.InitialWindowSize <= 0 {
		c.InitialWindowSize = DefaultH2InitialWindowSize
	}
	return c
}

// H2Stats are a server's HTTP/2 counters (ServerStats.HTTP2), cumulative.
type H2Stats struct {
	Connections uint64 // connections that spoke HTTP/2
	Streams     uint64 // streams whose request was accepted
	Refused     uint64 // streams refused with REFUSED_STREAM (over MaxConcurrentStreams, or after GOAWAY)
	ResetsIn    uint64 // RST_STREAM frames received
	ResetsOut   uint64 // streams the server reset (errors, an aborted Stream)
	GoAways     uint64 // connections sent GOAWAY, for any reason
	// Connections closed for exceeding a bound, by bound.
	TooManyResets   uint64 // MaxResetsPerSecond (rapid reset)
	ControlFlood    uint64 // MaxControlPerSecond (SETTINGS, PING, PRIORITY, empty frames)
	Continuations   uint64 // MaxContinuations (CONTINUATION flood)
	HeaderListLarge uint64 // MaxHeaderListSize
	HPACKErrors     uint64 // bad HPACK, or a table over HeaderTableSize
	ProtocolErrors  uint64 // other connection errors (bad frames, flow control)
	WriteStalls     uint64 // closed: DATA blocked by a client's windows for WriteTimeout
	// Writes counts the writes handed to the sockets: each carries the
	// frames of every stream that had something to send then (the
	// answers given while a packet's requests were delivered leave
	// together).
	Writes uint64
}

type h2Counters struct {
	connections, streams, refused, resetsIn, resetsOut, goAways atomic.Uint64
	tooManyResets, controlFlood, continuations, headerListLarge atomic.Uint64
	hpackErrors, protocolErrors, writeStalls                    atomic.Uint64
	writes                                                      atomic.Uint64
}

func (c *h2Counters) stats() H2Stats {
	return H2Stats{
		Connections: c.connections.Load(), Streams: c.streams.Load(), Refused: c.refused.Load(),
		ResetsIn: c.resetsIn.Load(), ResetsOut: c.resetsOut.Load(), GoAways: c.goAways.Load(),
		TooManyResets: c.tooManyResets.Load(), ControlFlood: c.controlFlood.Load(),
		Continuations: c.continuations.Load(), HeaderListLarge: c.headerListLarge.Load(),
		HPACKErrors: c.hpackErrors.Load(), ProtocolErrors: c.protocolErrors.Load(),
		WriteStalls: c.writeStalls.Load(), Writes: c.writes.Load(),
	}
}

// registerH2Metrics adds the HTTP/2 counters to the server's metrics
// ("http.<name>.h2.<counter>").
func (s *Server) registerH2Metrics(gauge func(string, func() int64)) {
	c := &s.stats.h2
	for name, a := range map[string]*atomic.Uint64{
		"h2.connections": &c.connections, "h2.streams": &c.streams, "h2.refused": &c.refused,
		"h2.resets.in": &c.resetsIn, "h2.resets.out": &c.resetsOut, "h2.goaways": &c.goAways,
		"h2.bounded.resets": &c.tooManyResets, "h2.bounded.control": &c.controlFlood,
		"h2.bounded.continuations": &c.continuations, "h2.bounded.headers": &c.headerListLarge,
		"h2.errors.hpack": &c.hpackErrors, "h2.errors.protocol": &c.protocolErrors,
		"h2.timeouts.write": &c.writeStalls, "h2.writes": &c.writes,
	} {
		gauge(name, func() int64 { return int64(a.Load()) })
	}
}

// h2TLS returns the TLS configuration of a server: the ALPN protocols
// offer h2 first unless HTTP/2 is disabled or the configuration names
// its own. The caller's configuration is not changed.
func h2TLS(cfg ServerConfig) *aio.TLSConfig {
	t := cfg.Socket.TLS
	if t == nil || cfg.HTTP2.Disable || t.Config != nil && t.Config.NextProtos != nil {
		return t
	}
	cp := *t
	if cp.Config == nil {
		cp.Config = &tls.Config{}
	} else {
		cp.Config = cp.Config.Clone()
	}
	cp.Config.NextProtos = []string{"h2", "http/1.1"}
	return &cp
}

// protoSniff is how a connection decides its protocol on its first
// bytes; the socket's event loop's.
type protoSniff struct {
	decided bool
	held    []byte // a prefix of the HTTP/2 preface, waiting for the rest
}

// protoPacket runs before the HTTP/1.1 parser on every packet: it hands
// the connection to HTTP/2 when TLS negotiated h2 or the first bytes are
// the client preface (h2c with prior knowledge), and reports whether it
// took the packet. Otherwise it returns the bytes for HTTP/1.1 (with any
// held back while they could still have been a preface).
func (c *Connection) protoPacket(data []byte) (rest []byte, handled bool, err error) {
	if h := c.h2.Load(); h != nil {
		return nil, true, h.onPacket(data)
	}
	if c.sniff.decided {
		return data, false, nil
	}
	if c.srv.cfg.HTTP2.Disable {
		c.sniff.decided = true
		return data, false, nil
	}
	if st, ok := c.sock.TLSState(); ok && st.NegotiatedProtocol == "h2" {
		c.sniff.decided = true
		return nil, true, c.startH2(data)
	}
	buf := data
	if len(c.sniff.held) > 0 {
		buf = append(c.sniff.held, data...)
	}
	n := min(len(buf), len(h2Preface))
	if string(buf[:n]) == h2Preface[:n] {
		if n < len(h2Preface) {
			c.sniff.held = slices.Clone(buf)
			return nil, true, nil
		}
		c.sniff.decided, c.sniff.held = true, nil
		return nil, true, c.startH2(buf)
	}
	c.sniff.decided, c.sniff.held = true, nil
	return buf, false, nil
}

func (c *Connection) startH2(data []byte) error {
	h := newH2Conn(c)
	c.h2.Store(h)
	c.srv.stats.h2.connections.Add(1)
	return h.onPacket(data)
}

// drainAny is drain for either protocol.
func (c *Connection) drainAny() {
	if h := c.h2.Load(); h != nil {
		h.drain()
		return
	}
	c.drain()
}

// HTTP2 reports whether the connection speaks HTTP/2.
func (c *Connection) HTTP2() bool { return c.h2.Load() != nil }

// h2Stream is one stream of an HTTP/2 connection. Guarded by
// Connection.mu.
type h2Stream struct {
	id  uint32
	req *Request
	at  int64 // sink.Nanotime when the request was delivered

	window     int64 // send window (DATA we may send)
	recvWindow int64 // receive window (request body the client may send)
	wantLen    int64 // the request's content-length, -1 if none

	delivered    bool // handed to the application (or answered by the connection)
	replied      bool // the answer's HEADERS are out
	remoteClosed bool // END_STREAM or RST_STREAM received
	sentEnd      bool // END_STREAM (or RST_STREAM) sent
	reset        bool // reset by either side: no more frames of it
	discard      bool // the request body is not kept (SkipBody, or answered early)
	queued       bool // in the connection's send queue
	fileWait     bool // in fileWaits: its file body waits for a chunk to be written

	body   h2Body  // the response's DATA still to send
	stream *Stream // the streamed body feeding it, if any

	// The request's context (request_context.go), made when first asked
	// for; dropped is why the stream was given up on, if it was.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	dropped error
}

// h2Conn is a Connection's HTTP/2 state. All of it is guarded by
// Connection.mu; the frame reader runs on the socket's event loop, the
// output owner on whichever goroutine answers or completes a write.
type h2Conn struct {
	c   *Connection
	cfg *H2Config

	// reading
	in          []byte // bytes received and not yet framed
	preface     bool
	gotSettings bool
	fr          *http2.Framer
	frIn        frameInput
	dec         *hpack.Decoder
	block       headerBlock
	lastStream  uint32     // highest stream the client opened
	ready       []*Request // requests to deliver once mu is released
	recvWindow  int64      // connection receive window
	recvUnacked int64      // DATA bytes to give back with WINDOW_UPDATE
	resets      rateWindow
	controls    rateWindow

	streams map[uint32]*h2Stream
	bodies  map[*Stream]*h2Stream // streamed bodies bound to their stream

	// output owner
	wb          bytes.Buffer // the Framer's output, moved into out
	enc         *hpack.Encoder
	hb          bytes.Buffer // the encoder's output
	date        string       // the date field's value, for the second dateSec
	dateSec     int64
	out         []byte // control and HEADERS frames of the next write
	outDones    []func(error)
	sendq       ring.Ring[*h2Stream] // streams with DATA to send and window for it
	fileWaits   []*h2Stream          // streams whose file body waits for a write (fileBody.waiting)
	sendWindow  int64                // connection send window
	peerWindow  int64                // the client's SETTINGS_INITIAL_WINDOW_SIZE
	inflight    int                  // DATA bytes handed to the outbox, not yet written
	maxInflight int

	batching   bool // the event loop is delivering requests: it writes their answers after
	goneAway   bool // GOAWAY sent: no new streams
	goAwayID   uint32
	failed     bool  // connection error: reading stopped, closing
	closed     bool  // the socket closed
	lastAct    int64 // last frame in or out
	progressAt int64 // last DATA written, or nothing blocked
	// partialAt is when the input began to hold an incomplete frame or
	// header block (0: it does not): the request timeout bounds it.
	partialAt int64
}

// headerBlock is the header block being received (HEADERS and its
// CONTINUATION frames).
type headerBlock struct {
	open      bool // HEADERS received, END_HEADERS not yet
	id        uint32
	endStream bool
	trailers  bool
	conts     int
	bytes     int
	listSize  int
	over      bool
	fields    []hpack.HeaderField
}

// rateWindow counts events in the current one-second window.
type rateWindow struct {
	start int64
	n     int
}

// add counts one event at now and reports whether the window's count is
// still within limit.
func (w *rateWindow) add(now int64, limit int) bool {
	if now-w.start >= 1e9 {
		w.start, w.n = now, 0
	}
	w.n++
	return w.n <= limit
}

// frameInput is the Framer's reader: it is given exactly one whole frame
// at a time, so a read never waits.
type frameInput struct{ b []byte }

func (f *frameInput) Read(p []byte) (int, error) {
	n := copy(p, f.b)
	f.b = f.b[n:]
	if n == 0 && len(p) > 0 {
		return 0, fmt.Errorf("http: h2 frame reader ran dry")
	}
	return n, nil
}

func newH2Conn(c *Connection) *h2Conn {
	cfg := &c.srv.cfg.HTTP2
	now := sink.Nanotime()
	h := &h2Conn{
		c: c, cfg: cfg,
		streams:     map[uint32]*h2Stream{},
		bodies:      map[*Stream]*h2Stream{},
		recvWindow:  65535,
		sendWindow:  65535,
		peerWindow:  65535,
		maxInflight: max(c.srv.cfg.WriteWindow, 2*h2FrameSize),
		lastAct:     now,
		progressAt:  now,
	}
	h.fr = http2.NewFramer(&h.wb, &h.frIn)
	h.fr.SetMaxReadFrameSize(h2FrameSize)
	h.dec = hpack.NewDecoder(cfg.HeaderTableSize, h.emitField)
	h.dec.SetMaxStringLength(cfg.MaxHeaderListSize)
	h.enc = hpack.NewEncoder(&h.hb)
	h.enc.SetMaxDynamicTableSizeLimit(cfg.HeaderTableSize)
	_ = h.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(cfg.MaxConcurrentStreams)},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(cfg.InitialWindowSize)},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(cfg.MaxHeaderListSize)},
		http2.Setting{ID: http2.SettingHeaderTableSize, Val: cfg.HeaderTableSize},
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
	)
	h.takeFramed()
	return h
}

// takeFramed moves what the Framer wrote into the next write.
func (h *h2Conn) takeFramed() {
	h.out = append(h.out, h.wb.Bytes()...)
	h.wb.Reset()
}
