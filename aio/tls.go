package aio

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// ErrHandshakeRefused is wrapped when the handshake stage refuses a new
// TLS connection (a handshake flood): the connection is closed at once and
// counted, instead of starving the handshakes already admitted.
var ErrHandshakeRefused = errors.New("aio: TLS handshake refused")

// TLSConfig configures a TLS socket (thesis ch. 5 §7: TLS as stages on top
// of the socket layer). The event loop holds a new connection until its
// ClientHello has arrived whole; the handshake then runs in steps on the
// handshake stage, a worker computing each step and none held while the
// peer's next flight is on its way. Records are decrypted inline as
// packets arrive and encrypted on the connection's normal output path.
type TLSConfig struct {
	// Certs are the server's certificate and key files; the first is the
	// default, the others are chosen by SNI. Ignored when Store or Config
	// supplies certificates.
	Certs []CertFiles `yaml:"certs"`
	// HandshakeTimeout bounds a handshake from accept to Finished
	// (0 → 10s): a peer that stalls, before or after its ClientHello, is
	// closed and counted by the connection's timer.
	HandshakeTimeout time.Duration `yaml:"handshakeTimeout"`
	// Stage is the handshake stage's configuration (name "aio.tls" unless
	// set; queue threshold 1024 and two workers per CPU, at least four,
	// unless set). Its queue threshold and predicate decide which
	// handshakes are admitted to their next step.
	Stage HandshakeStageConfig `yaml:"stage"`

	// Store serves the certificates (SNI, Reload); built from Certs when
	// nil.
	Store *CertStore `yaml:"-"`
	// Config is the base crypto/tls configuration (cloned; for a client:
	// RootCAs, ServerName). MinVersion is raised to TLS 1.2, NextProtos
	// defaults to http/1.1.
	Config *tls.Config `yaml:"-"`
}

// HandshakeStageConfig sizes the handshake stage.
type HandshakeStageConfig struct {
	Name string `yaml:"name"` // "" → "aio.tls"
	// Queue is the number of handshake steps waiting for a worker
	// (0 → 1024); beyond it the connection is refused (closed, counted).
	Queue int `yaml:"queue"`
	// Workers is the most handshake steps computing at once (0 → two per
	// CPU, at least four). Handshakes waiting for their peer hold no
	// worker: they cost their connection's descriptor and buffers.
	Workers int `yaml:"workers"`
}

func (c TLSConfig) withDefaults() TLSConfig {
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.Stage.Name == "" {
		c.Stage.Name = "aio.tls"
	}
	if c.Stage.Queue == 0 {
		c.Stage.Queue = 1024
	}
	if c.Stage.Workers == 0 {
		c.Stage.Workers = max(4, 2*runtime.GOMAXPROCS(0))
	}
	return c
}

// Validate reports an invalid field, wrapping ErrInvalidConfig.
func (c TLSConfig) Validate() error {
	switch {
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("%w: tls.handshakeTimeout must not be negative", ErrInvalidConfig)
	case c.Stage.Queue < 0, c.Stage.Workers < 0:
		return fmt.Errorf("%w: tls.stage queue and workers must not be negative", ErrInvalidConfig)
	}
	for i, f := range c.Certs {
		if f.Cert == "" || f.Key == "" {
			return fmt.Errorf("%w: tls.certs[%d] needs both cert and key", ErrInvalidConfig, i)
		}
	}
	return nil
}

// serverConfig builds the crypto/tls server configuration: TLS 1.2 and
// 1.3 only, ALPN http/1.1, session tickets on, certificates by SNI.
func (c TLSConfig) serverConfig() (*tls.Config, *CertStore, error) {
	var base *tls.Config
	if c.Config != nil {
		base = c.Config.Clone()
	} else {
		base = &tls.Config{}
	}
	store := c.Store
	if store == nil && base.GetCertificate == nil && len(base.Certificates) == 0 {
		if len(c.Certs) == 0 {
			return nil, nil, fmt.Errorf("%w: a TLS server needs a certificate", ErrNoCertificate)
		}
		var err error
		if store, err = NewCertStore(c.Certs...); err != nil {
			return nil, nil, err
		}
	}
	if store != nil {
		base.Certificates = nil
		base.GetCertificate = store.GetCertificate
	}
	fixVersions(base)
	return base, store, nil
}

// clientConfig builds a client's configuration from c.Config.
func (c TLSConfig) clientConfig() *tls.Config {
	var base *tls.Config
	if c.Config != nil {
		base = c.Config.Clone()
	} else {
		base = &tls.Config{}
	}
	if base.ClientSessionCache == nil {
		base.ClientSessionCache = tls.NewLRUClientSessionCache(0)
	}
	fixVersions(base)
	return base
}

func fixVersions(c *tls.Config) {
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	if c.MaxVersion != 0 && c.MaxVersion < c.MinVersion {
		c.MaxVersion = c.MinVersion
	}
	if c.NextProtos == nil {
		c.NextProtos = []string{"http/1.1"}
	}
	// Full records (16 KiB of plaintext), as nginx's ssl_buffer_size:
	// fewer records to seal and send, and encryptLocked can tell which
	// record ends each write.
	c.DynamicRecordSizingDisabled = true
}

// TLSStats counts a TLS socket's handshakes.
type TLSStats struct {
	Handshakes uint64 // completed
	Resumed    uint64 // completed by session resumption (no certificate sent)
	Refused    uint64 // refused by the handshake stage (flood)
	// Failures by reason: the peer stalled past HandshakeTimeout, sent
	// something that is not TLS, sent an alert or closed, or anything else
	// (no common version or cipher, bad certificate...).
	Timeouts, NotTLS, PeerGone, OtherFailures uint64
	TLS12, TLS13                              uint64 // completed, by version
}

type tlsCounters struct {
	handshakes, resumed, refused             atomic.Uint64
	timeouts, notTLS, peerGone, otherFailure atomic.Uint64
	tls12, tls13                             atomic.Uint64
	// How handshake flights left: written to the socket by the goroutine
	// that computed them, or (partly) through the outbox and the event
	// loop (tlsflight.go); and the event-loop wake-ups asked to announce
	// an established connection (announceOnLoop).
	flightsDirect, flightsQueued, announceWakes atomic.Uint64
}

func (t *tlsCounters) snapshot() TLSStats {
	return TLSStats{
		Handshakes: t.handshakes.Load(), Resumed: t.resumed.Load(), Refused: t.refused.Load(),
		Timeouts: t.timeouts.Load(), NotTLS: t.notTLS.Load(), PeerGone: t.peerGone.Load(),
		OtherFailures: t.otherFailure.Load(), TLS12: t.tls12.Load(), TLS13: t.tls13.Load(),
	}
}

// countFailure classifies a failed handshake.
func (t *tlsCounters) countFailure(err error) {
	var rh tls.RecordHeaderError
	switch {
	case errors.Is(err, errHandshakeTimeout):
		t.timeouts.Add(1)
	case errors.Is(err, ErrHandshakeRefused):
		t.refused.Add(1)
	case errors.Is(err, errNotTLS), errors.As(err, &rh):
		t.notTLS.Add(1)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		strings.Contains(err.Error(), "remote error"):
		t.peerGone.Add(1)
	default:
		t.otherFailure.Add(1)
	}
}

func (t *tlsCounters) countDone(st tls.ConnectionState) {
	t.handshakes.Add(1)
	if st.DidResume {
		t.resumed.Add(1)
	}
	if st.Version == tls.VersionTLS13 {
		t.tls13.Add(1)
	} else {
		t.tls12.Add(1)
	}
}

// tlsSession is one connection's TLS state: crypto/tls over a
// tlsTransport. Ciphertext in: feed. Plaintext out: write. Its handshake
// runs in steps on the handshake stage (tlsstep.go).
type tlsSession struct {
	tr   *tlsTransport
	conn *tls.Conn
	// inMu serializes feed (decryption) so that plaintext is delivered in
	// order even if packets are handed over by different goroutines.
	inMu sync.Mutex
	ok   atomic.Bool
	// fresh is set when the handshake ends: crypto/tls may hold records
	// that arrived with the handshake's last flight in its own buffer, so
	// the first read decrypts even if the transport is empty.
	fresh atomic.Bool
	raw   func([]byte) error // the handshake's output, straight to the socket
	hsOut []byte             // the current step's output (the handshake goroutine)

	// Once established, records are collected in pending and the
	// connection takes them, in order, onto its output (encryptLocked).
	// While sealing, ends records where each record ends in pending.
	pendMu  sync.Mutex
	pending []byte
	sealing bool
	ends    []int
	plain   []byte     // encryptLocked's scratch (under the connection's lock)
	outOps  []writeOp  // encryptLocked's result, reused (the connection's lock)
	sent    sealedBufs // sealed buffers on their way out (the connection's lock)

	handshakeSteps
}

func newTLSSession(server bool, cfg *tls.Config, local, remote net.Addr, raw func([]byte) error) *tlsSession {
	s := &tlsSession{raw: raw, handshakeSteps: newHandshakeSteps(server, cfg)}
	s.tr = newTLSTransport(local, remote, s.output)
	s.tr.turns = s
	if server {
		s.conn = tls.Server(s.tr, cfg)
	} else {
		s.conn = tls.Client(s.tr, cfg)
	}
	return s
}

// output receives crypto/tls's records: during the handshake they are
// gathered and leave for the socket in one write when the step ends
// (flushHandshake); afterwards they are collected for the connection.
func (s *tlsSession) output(b []byte) error {
	if !s.ok.Load() {
		if s.hsOut == nil {
			s.hsOut = getCipherBuf(len(b)) // a flight fits the smallest class
		}
		s.hsOut = append(s.hsOut, b...)
		return nil
	}
	s.pendMu.Lock()
	s.pending = append(s.pending, b...)
	if s.sealing {
		s.ends = append(s.ends, len(s.pending))
	}
	s.pendMu.Unlock()
	return nil
}

// recordOverhead bounds the bytes a record adds to its plaintext (header,
// explicit nonce, tag, TLS 1.3's content type).
const recordOverhead = recordHeaderLen + 8 + 16 + 1

// seal encrypts the bytes of ops and returns every record collected, the
// ones the read side left (alerts) first, in one buffer, and where each
// of ops' records ends in it (offsets of cipher; nil when they are not
// exactly ops' records, e.g. another record came in between). Records
// are full (maxPlaintext bytes) but the last: pieces are sealed where
// they are when a record's worth starts at a record boundary, and
// gathered through a pooled buffer otherwise. The buffer returned is the
// caller's; ends is valid until the next seal.
func (s *tlsSession) seal(ops []writeOp) (cipher []byte, ends []int, err error) {
	total, pieces := 0, 0
	eachPiece(ops, func(b []byte) { total, pieces = total+len(b), pieces+1 })
	s.pendMu.Lock()
	need := len(s.pending) + total + (total/maxPlaintext+1)*recordOverhead
	if cap(s.pending) < need {
		s.pending = append(getCipherBuf(need), s.pending...)
	}
	s.sealing, s.ends = true, s.ends[:0]
	s.pendMu.Unlock()
	g := recordGather{conn: s.conn, left: pieces}
	eachPiece(ops, func(b []byte) {
		if err == nil {
			err = g.add(b)
		}
	})
	g.release()
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	s.sealing = false
	cipher, ends = s.pending, s.ends
	s.pending = nil
	if len(ends) != (total+maxPlaintext-1)/maxPlaintext {
		ends = nil
	}
	return cipher, ends, err
}

// recordGather hands plaintext pieces to crypto/tls so that every record
// but the last is full.
type recordGather struct {
	conn  *tls.Conn
	left  int     // pieces still to come, this one included
	chunk *[]byte // a record's worth being gathered (from chunkPool)
}

// chunkPool holds record-sized plaintext buffers: recordGather's chunks
// and drainLocked's read buffers.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 0, maxPlaintext); return &b }}

// plainBufStats counts chunkPool buffers lent to drainLocked and given
// back (tests read them).
var plainBufStats struct{ lent, returned atomic.Uint64 }

// getPlainBuf lends a record-sized buffer to drainLocked.
func getPlainBuf() *[]byte {
	plainBufStats.lent.Add(1)
	return chunkPool.Get().(*[]byte)
}

// putPlainBuf gives back a buffer from getPlainBuf; nothing may use it
// afterwards.
func putPlainBuf(p *[]byte) {
	*p = (*p)[:0]
	plainBufStats.returned.Add(1)
	chunkPool.Put(p)
}

func (g *recordGather) add(b []byte) error {
	g.left--
	for len(b) > 0 {
		if g.chunk == nil || len(*g.chunk) == 0 {
			k := len(b) // the last piece: all of it
			if g.left > 0 {
				k = len(b) / maxPlaintext * maxPlaintext // whole records of it
			}
			if k > 0 {
				if _, err := g.conn.Write(b[:k]); err != nil {
					return err
				}
				b = b[k:]
				continue
			}
			if g.chunk == nil {
				g.chunk = chunkPool.Get().(*[]byte)
			}
		}
		c := *g.chunk
		n := min(len(b), maxPlaintext-len(c))
		c = append(c, b[:n]...)
		b = b[n:]
		*g.chunk = c
		if len(c) == maxPlaintext || (g.left == 0 && len(b) == 0) {
			*g.chunk = c[:0]
			if _, err := g.conn.Write(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// release returns the chunk to its pool.
func (g *recordGather) release() {
	if g.chunk != nil {
		*g.chunk = (*g.chunk)[:0]
		chunkPool.Put(g.chunk)
	}
}

func (s *tlsSession) hasPending() bool {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	return len(s.pending) > 0
}

// feed takes ciphertext from the socket and hands every complete record's
// plaintext to deliver (which must copy what it keeps: the slice is
// reused). Before the handshake completed it only buffers. A non-nil
// error is fatal for the connection (a bad record, a close_notify: io.EOF).
func (s *tlsSession) feed(p []byte, deliver func([]byte)) error {
	if !s.ok.Load() {
		s.tr.Feed(p)
		return nil
	}
	s.inMu.Lock()
	defer s.inMu.Unlock()
	s.tr.lend(p)
	defer s.tr.unlend()
	return s.drainLocked(deliver)
}

// drain decrypts whatever complete records are buffered.
func (s *tlsSession) drain(deliver func([]byte)) error {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	return s.drainLocked(deliver)
}

// drainLocked reads plaintext into a record-sized buffer borrowed from
// chunkPool for this call only: deliver copies what it keeps, so the
// buffer is given back, once, before drainLocked returns. (It used to be
// the session's own, 16 KiB allocated per connection and kept for its
// life: a quarter of the bytes a full handshake allocated.)
func (s *tlsSession) drainLocked(deliver func([]byte)) error {
	p := getPlainBuf()
	defer putPlainBuf(p)
	buf := (*p)[:maxPlaintext]
	for {
		n, err := s.conn.Read(buf)
		if n > 0 {
			deliver(buf[:n])
		}
		if err == nil && n < len(buf) && s.tr.Buffered() == 0 {
			// crypto/tls returned a record's plaintext whole and holds no
			// more input (tlsTransport.handed): another Read would only
			// fail, at the cost of a call through crypto/tls and an
			// object.
			return nil
		}
		if err != nil {
			if err == errWouldBlock {
				return nil // the rest of the record is still on its way
			}
			// (errors.As's target escapes: an object per call, kept off
			// the path every read ends on.)
			var ne net.Error
			if errors.As(err, &ne) && ne.Temporary() {
				return nil
			}
			return err
		}
	}
}

// closeNotify sends the close_notify alert.
func (s *tlsSession) closeNotify() error { return s.conn.CloseWrite() }

// state returns the negotiated parameters.
func (s *tlsSession) state() tls.ConnectionState { return s.conn.ConnectionState() }

// Handshakes is the handshake stage: a TLS connection whose ClientHello
// has arrived whole waits on its queue, guarded by its predicate, for one
// of its workers to run the handshake's next step; a step ends when the
// handshake has to wait for the peer, and the worker goes back to the
// pool. Get it with TLSHandshakes.
type Handshakes struct {
	st      *stage.Stage
	cfg     TLSConfig
	counter tlsCounters
	runners runnerPool // idle handshake coroutines (tlsrunner.go)
}

// TLSHandshakes returns the manager's handshake stage named by cfg, creating it if needed.
func TLSHandshakes(m *stage.Manager, cfg TLSConfig) (*Handshakes, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: the TLS handshake stage needs a manager", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	for range 2 {
		if st, ok := m.Stage(cfg.Stage.Name); ok {
			h, ok := st.Handler().(*handshakeHandler)
			if !ok {
				return nil, fmt.Errorf("%w: stage %q exists and is not a TLS handshake stage", ErrInvalidConfig, cfg.Stage.Name)
			}
			return h.hs, nil
		}
		hs := &Handshakes{cfg: cfg, runners: runnerPool{max: max(16, 4*cfg.Stage.Workers)}}
		st, err := m.CreateStage(cfg.Stage.Name, &handshakeHandler{hs: hs}, stage.StageConfig{
			Queue: stage.QueueConfig{Threshold: cfg.Stage.Queue},
			// A worker only computes (waiting for the peer holds none),
			// so a fixed pool of a few per CPU keeps the handshakes
			// from crowding out the rest of the server.
			ThreadPool: stage.ThreadPoolConfig{Min: cfg.Stage.Workers, Max: cfg.Stage.Workers},
			Batching:   stage.BatchingConfig{Max: 1}, // one step per worker at a time
		})
		if errors.Is(err, stage.ErrStageExists) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("aio: TLS handshake stage: %w", err)
		}
		hs.st = st
		return hs, nil
	}
	return nil, fmt.Errorf("aio: TLS handshake stage %q: creation raced", cfg.Stage.Name)
}

// Stage returns the handshake stage.
func (h *Handshakes) Stage() *stage.Stage { return h.st }

// Stats returns the handshake counters.
func (h *Handshakes) Stats() TLSStats { return h.counter.snapshot() }

// submit queues s's first step; done is called with the handshake's
// outcome (on the handshake's goroutine). A refusal is counted and
// returned at once (and done is not called). A connection's session has
// its stage and done set already (startTLS: the connection's timer reads
// them), and keeps them.
func (h *Handshakes) submit(s *tlsSession, done func(error)) error {
	if s.hs == nil {
		s.hs, s.done = h, done
	}
	if err := h.enqueue(s); err != nil {
		s.settle(err)
		return err
	}
	return nil
}

// enqueue asks for a worker to run s's next step.
func (h *Handshakes) enqueue(s *tlsSession) error {
	if err := h.st.Sink().Enqueue(s); err != nil {
		return fmt.Errorf("%w: %w", ErrHandshakeRefused, err)
	}
	return nil
}

type handshakeHandler struct{ hs *Handshakes }

func (h *handshakeHandler) Init(c *stage.Context) error {
	for name, f := range map[string]func() uint64{
		"handshakes": h.hs.counter.handshakes.Load, "resumed": h.hs.counter.resumed.Load,
		"refused": h.hs.counter.refused.Load, "timeouts": h.hs.counter.timeouts.Load,
		"failures.nottls": h.hs.counter.notTLS.Load, "failures.peergone": h.hs.counter.peerGone.Load,
		"failures.other": h.hs.counter.otherFailure.Load,
	} {
		c.Profile(name, func() float64 { return float64(f()) })
	}
	return nil
}

// Destroy stops the idle handshake coroutines; a handshake still in
// progress ends on its own and its coroutine with it.
func (h *handshakeHandler) Destroy() error {
	h.hs.runners.close()
	return nil
}

func (h *handshakeHandler) HandleEvents(batch []sink.Event) error {
	for _, ev := range batch {
		s, ok := ev.(*tlsSession)
		if !ok {
			return fmt.Errorf("%w: TLS handshake stage got %T", ErrBadEvent, ev)
		}
		s.step()
	}
	return nil
}
