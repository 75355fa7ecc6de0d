package http

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Reply is the event an application enqueues on a Connection to answer a
// request: the response to Req, sent after the responses to the requests
// received before it on the same connection.
type Reply struct {
	Req  *Request
	Resp *Response
	// Body holds the payload when Resp.Body is nil: buffers sent in order
	// after the header without being copied (a cached page, a file's
	// bytes), Resp.ContentLength bytes in all. They must not change until
	// Done is called.
	Body [][]byte
	// Done, if set, is called exactly once when the Connection no longer
	// needs the reply's buffers: after they were written to the kernel (or
	// copied), or with an error when the reply was refused or dropped
	// because the connection closed. It must not block. For a streamed
	// reply it is called once the header has been handed over.
	Done func(error)
	// Stream, if set, supplies the payload piece by piece (see Stream);
	// Body and Resp.Body are then nil.
	Stream *Stream

	// tracked: Done also completes the reply's admission (the
	// Connection's predicate admitted it), so it is called once the
	// reply's own bytes are written to the kernel, even when they were
	// copied.
	tracked bool
}

// refuse gives up on a reply never handed to the output: Done gets err
// and a file body's reference is released.
func (r *Reply) refuse(err error) {
	if r.Resp != nil {
		r.Resp.release()
	}
	finish(r.Done, err)
}

// Respond sends resp as the answer to req on req's connection.
func Respond(req *Request, resp *Response) error {
	if req == nil {
		return fmt.Errorf("%w: nil request", ErrBadReply)
	}
	c, ok := req.Conn.(*Connection)
	if !ok || c == nil {
		return fmt.Errorf("%w: Conn is %T", ErrNoConnection, req.Conn)
	}
	return c.Enqueue(Reply{Req: req, Resp: resp})
}

// outWrite is a formatted response (or interim 100 Continue, or a piece
// of a streamed body) on its way to the socket's outbox. (With HTTP/2 a
// frame of one stream; with sendfile, a header followed by a file region.)
type outWrite struct {
	data []byte
	bufs [][]byte
	done func(error)
	// file, if set, is n bytes of it from off after data (a FileBody);
	// the write owns one reference.
	file   *aio.SharedFile
	off, n int64
}

// waiting is a request handed to the application and not answered yet.
type waiting struct {
	req *Request // nil for the pseudo-requests of errors and timeouts
	at  int64    // sink.Nanotime when it was parsed
}

type doneCall struct {
	f   func(error)
	err error
}

// Connection is an HTTP connection of a Server (Sandstorm's
// httpConnection). Every Request carries its Connection in Request.Conn.
// A Connection is a sink.Sink of Reply events: enqueue the answer to each
// request and the Connection sends them in request order, formatting the
// header inline with the server's shared Formatter, and closes itself
// after a response that does not keep the connection alive. Enqueue never
// blocks and never rejects a valid reply while the connection is open.
//
// A Connection parses requests and puts the replies in order; it does not
// own the output and keeps no output queue: each formatted reply is
// written straight into the aio.Connection's outbox (the connection's one
// output queue), which holds the write window, write completions, the
// closing state, the write timeout and the output budget.
//
// Its state is two groups, both guarded by mu, grouped in files by the
// goroutine that runs their code:
//   - pipeline (conn_read.go): requests coming in, fed by the socket's
//     event loop;
//   - replies (conn_reply.go): the answers going out, the connection's
//     output owner, run by whichever goroutine answers;
//
// and the timer's visits (conn_timer.go), on the socket's maintenance
// goroutine. Lock order: mu, then the aio outbox's lock (a leaf: aio
// calls nothing of ours while holding it, and runs completions such as
// Reply.Done only after releasing it).
type Connection struct {
	// The fields a request reads or writes come first, packed, and in the
	// Connection itself rather than in arrays of their own (the queues'
	// first values, the scratch slices' first elements, the header
	// buffer): at 1024 connections a connection's memory has left the
	// CPU's cache by its next request, and every line a request touches
	// is a miss (docs/haboob-bench.md, "Cutting the cold lines"). The
	// parser's state follows them, then what is used per connection or
	// rarely.

	// Immutable once the connection is published.
	srv       *Server
	sock      *aio.Connection
	overLimit bool // beyond MaxConnections: every request gets 503, then close

	// h2 is the connection's HTTP/2 state (h2.go), nil while it speaks
	// HTTP/1.1; set once, on the event loop, before any request of it.
	h2 atomic.Pointer[h2Conn]
	// sniff is the event loop's choice of protocol (h2.go).
	sniff protoSniff

	// Admission of replies; any goroutine. Every reply it admits is
	// completed exactly once, through the reply's Done (see track).
	adm sink.Admission

	mu sync.Mutex
	pipeline
	replies
	// The timer's view; guarded by mu.
	lastAct int64 // last traffic in or out
	// calls are the Done callbacks collected under mu, run by unlock
	// after mu is released; callsArr is their array while they are few.
	calls    []doneCall
	callsArr [1]doneCall
	// header is the buffer the connection's replies are formatted into
	// while no earlier write holds it (conn_headbuf.go); set up at the
	// first HTTP/1.1 reply.
	header headerBuffer
	// loopHeader is the header buffer of the socket's event loop, shared
	// with its other connections (conn_headbuf.go), once found.
	loopHeader *headerBuffer

	// parser reads the requests (pipeline; guarded by mu).
	parser Parser

	// Used per connection or rarely.

	id uint64
	// peer is the client's IP address and principal its string form:
	// the ID of its requests' principal when the server has a
	// ClientPolicy ("" for a peer without an IP address: anonymous).
	peer      netip.Addr
	principal string
	// principalValue is principal boxed once, what every request of the
	// peer's carries (SetPrincipal): no allocation per request.
	principalValue any
	busyAt         int64 // when the timer last found output waiting to be written; guarded by mu
	// life is the requests' Context, cancelled on close (request_context.go).
	life connContext
}

// pipeline is a Connection's request side: received bytes held, parsed
// and handed to the application in order, at most MaxPipeline of them
// unanswered. Guarded by Connection.mu. The socket's event loop feeds it
// (onPacket); one goroutine at a time (pumping) parses and delivers: the
// event loop, or a goroutine whose reply made room in the pipeline.
// (The Parser is the Connection's, after the fields of both groups.)
type pipeline struct {
	pumping   bool
	readDone  bool // no more requests will be read
	linger    bool // close with a lingering close: input may be left unread
	delivered uint64
	nextIn    uint64 // the sequence number of the next request
	reqStart  int64  // when the request being received began (0: none)
	bodies    int64  // request-body bytes held against the server's BodyBudget
	held      [][]byte
	heldBuf   [][]byte // held's backing array while it is short (heldArr at first)
	heldArr   [1][]byte
	heldBytes int
	// wall is the wall clock read once when a packet arrives, kept while
	// it is parsed and its requests are delivered (zero otherwise): it
	// stamps their Received and the Date of the replies emitted meanwhile
	// (wallNow), so an inline answer reads the wall clock once, not three
	// times. It is at most one delivery round old. mono is the packet's
	// sink.Nanotime reading, kept alike: a reply emitted meanwhile records
	// the connection's activity at it (0 otherwise: the clock is read).
	wall  time.Time
	mono  int64
	ready fifo[*Request] // parsed, not yet handed to the application
	// batch and scratch are the pumping goroutine's, each on its array
	// of one at first.
	batch      []*Request
	scratch    []*Request
	batchArr   [1]*Request
	scratchArr [1]*Request
}

// replies is a Connection's output owner: it puts the answers in request
// order and writes each one, formatted, into the socket's outbox as its
// turn comes. It is the one place a connection's responses are sequenced
// (where HTTP/2 would interleave its streams' frames). Guarded by
// Connection.mu; run by whichever goroutine answers (a stage's, or the
// event loop's for the connection's own answers). Its only closing flags
// are protocol ones (closing: no more answers; closed: SinkClosed came);
// whether the output is closing is the outbox's (Socket().Closing()).
type replies struct {
	closing  bool // no more answers: close once the current stream ends
	closed   bool // the socket closed (SinkClosed handled)
	wantCont bool // a 100 Continue is due once nextOut reaches contSeq
	nextOut  uint64
	waitq    fifo[waiting]    // requests owed an answer, in order
	pending  map[uint64]Reply // answers waiting for earlier ones
	stream   *Stream          // the streamed reply being sent: later replies wait
	streamAt int64            // when the stream last got a piece
	contSeq  uint64
}

var _ sink.Sink = (*Connection)(nil)

func newConnection(s *Server, sock *aio.Connection) *Connection {
	now := sink.Nanotime()
	c := &Connection{srv: s, sock: sock, id: s.nextID.Add(1), lastAct: now}
	c.heldBuf = c.heldArr[:0]
	c.batch, c.scratch = c.batchArr[:0], c.scratchArr[:0]
	c.calls = c.callsArr[:0]
	c.parser = Parser{Limits: s.cfg.Limits, ClassHeader: s.cfg.ClassHeader, Conn: c,
		SkipBody: s.cfg.SkipBody, ReserveBody: c.reserveBody, Now: c.wallNow}
	if cp := s.cfg.Clients; cp != nil {
		c.peer = peerAddr(sock.RemoteAddr())
		if c.peer.IsValid() {
			c.principal = c.peer.String()
		}
		c.principalValue = c.principal
		c.parser.NoClass = !cp.ClassTrusted(c.peer)
	}
	c.joinLoop()
	return c
}

// ID is unique among the connections of a server.
func (c *Connection) ID() uint64 { return c.id }

// Closed reports whether the connection has closed: replies enqueued on
// it are dropped.
func (c *Connection) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// RemoteAddr is the client's address.
func (c *Connection) RemoteAddr() net.Addr { return c.sock.RemoteAddr() }

// LocalAddr is the server's address of the connection.
func (c *Connection) LocalAddr() net.Addr { return c.sock.LocalAddr() }

// Socket returns the underlying aio connection.
func (c *Connection) Socket() *aio.Connection { return c.sock }

// SendsFiles reports whether the connection sends a Response.File from
// its descriptor at a bounded memory cost, without reading the file into
// memory whole: with sendfile(2) over HTTP/1.1 on a plain socket, or a
// chunk at a time (pread) on an HTTP/2 stream, with or without TLS. It
// is false for HTTP/1.1 over TLS, which reads the whole body into memory
// to encrypt it: a server should stream large files there instead.
func (c *Connection) SendsFiles() bool { return c.HTTP2() || c.sock.SendsFiles() }

// String names the connection in logs.
func (c *Connection) String() string {
	return fmt.Sprintf("http.%s#%d(%v)", c.srv.cfg.Name, c.id, c.sock.RemoteAddr())
}

// Key implements stage.Keyed, so that a stage can handle the events of one
// connection in order.
func (c *Connection) Key() string { return c.String() }

// ---- replies (any goroutine) ----

// Enqueue queues a Reply (or *Reply) to one of this connection's requests.
// It never blocks. It fails with an error wrapping ErrBadReply for a reply
// that is not valid here, or sink.ErrClosed once the connection is closed;
// Done is called in every case.
func (c *Connection) Enqueue(e sink.Event) error {
	r, err := asReply(e)
	if err != nil {
		return err
	}
	tk, err := c.adm.Admit(e)
	if err != nil {
		r.refuse(err)
		return err
	}
	track(&r, tk, e)
	return c.reply(r)
}

// Reject answers req with 503 Service Unavailable and Retry-After
// (retryAfter, or the server's RetryAfter if it is 0): the answer to a
// request that a stage of the application refused to enqueue. It is
// counted in ServerStats.Rejected, like the requests the server's own
// request sink refuses.
func (c *Connection) Reject(req *Request, retryAfter time.Duration) error {
	if retryAfter == 0 {
		retryAfter = c.srv.cfg.RetryAfter
	}
	// Counted before the reply leaves, so that a client that has its 503
	// also sees it in the statistics.
	c.srv.stats.rejected.Add(1)
	err := c.reply(Reply{Req: req, Resp: ServiceUnavailable(retryAfter)})
	if err != nil {
		c.srv.stats.rejected.Add(^uint64(0)) // not answered after all
	}
	return err
}

// Send is Enqueue for a Reply, without boxing it into an event.
func (c *Connection) Send(r *Reply) error {
	if r == nil {
		return fmt.Errorf("%w: nil *Reply", ErrBadReply)
	}
	tk, err := c.adm.Admit(r)
	if err != nil {
		r.refuse(err)
		return err
	}
	cp := *r
	track(&cp, tk, r)
	return c.reply(cp)
}

// Answer is Send for a Reply value: the same admission, ordering and
// formatting, without a *Reply on the heap when the connection has no
// admission predicate (a predicate is handed a *Reply, as Send's, made
// then). Haboob's inline cache hits use it.
func (c *Connection) Answer(r Reply) error {
	if c.adm.Predicate() != nil {
		p := new(Reply)
		*p = r
		return c.Send(p)
	}
	return c.reply(r)
}

// EnqueueMany queues every reply of es, or none if one is not a valid
// Reply, the connection is closed or the predicate refuses one (then the
// Done of each reply is called with the error).
func (c *Connection) EnqueueMany(es []sink.Event) error {
	rs, err := c.admit(es)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range rs {
		if err := c.reply(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// EnqueueLossy is Enqueue reporting only whether the reply was accepted.
func (c *Connection) EnqueueLossy(e sink.Event) bool { return c.Enqueue(e) == nil }

// Prepare checks es (valid replies the predicate admits, the connection
// open); Commit sends them, Abort calls their Done with an error. A
// Connection reserves nothing: it never refuses a valid reply for lack
// of room.
func (c *Connection) Prepare(es []sink.Event) (sink.Txn, error) {
	rs, err := c.admit(es)
	if err != nil {
		return nil, err
	}
	return &replyTxn{c: c, rs: rs}, nil
}

type replyTxn struct {
	c    *Connection
	rs   []Reply
	once sync.Once
}

func (t *replyTxn) Commit() {
	t.once.Do(func() {
		for _, r := range t.rs {
			_ = t.c.reply(r)
		}
	})
}

var errAborted = fmt.Errorf("http: reply transaction aborted: %w", sink.ErrRejected)

// Abort drops the replies: their Done is called with an error (and
// their admission is given back).
func (t *replyTxn) Abort() {
	t.once.Do(func() {
		for _, r := range t.rs {
			r.refuse(errAborted)
		}
	})
}

// admit checks that es are replies and the connection open, and admits
// them all, or none; the replies it returns are tracked (see track). On
// refusal the Done of each reply of es is called with the error.
func (c *Connection) admit(es []sink.Event) ([]Reply, error) {
	rs := make([]Reply, 0, len(es))
	var err error
	for _, e := range es {
		r, rerr := asReply(e)
		if rerr != nil {
			err = rerr
			continue
		}
		rs = append(rs, r)
	}
	if err == nil && c.Closed() {
		err = c.closedErr()
	}
	var tk sink.Ticket
	if err == nil {
		tk, err = c.adm.AdmitMany(es)
	}
	if err != nil {
		for _, r := range rs {
			r.refuse(err)
		}
		return nil, err
	}
	for i := range rs {
		track(&rs[i], tk, es[i])
	}
	return rs, nil
}

// track has r's Done complete its admission too: Done (with the time
// since admission) when the reply is written, Cancel when it fails or is
// dropped. The Connection calls a reply's Done exactly once whatever
// happens to it, so the ticket is completed exactly once. It costs one
// closure per admitted reply, and nothing when no predicate is installed.
func track(r *Reply, tk sink.Ticket, e sink.Event) {
	if tk == (sink.Ticket{}) {
		return
	}
	done, at := r.Done, sink.Nanotime()
	r.Done = func(err error) {
		if err != nil {
			tk.Cancel(e)
		} else {
			tk.Done(e, time.Duration(sink.Nanotime()-at), 0)
		}
		if done != nil {
			done(err)
		}
	}
	r.tracked = true
}

// Len is the number of replies waiting for earlier ones. (A reply whose
// turn has come is written into the socket's outbox at once; the socket
// counts what it has not yet written: Socket().Len().)
func (c *Connection) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// SetPredicate installs an admission predicate run on every enqueued reply
// (nil: none), bound to c first if it is a sink.Binder. A predicate that
// counts what it admitted (sink.Completer, sink.Canceler) gets each reply
// back once: done when the reply's bytes are written to the kernel (a
// streamed reply: its header), cancelled when it is refused after
// admission (not valid here), dropped or left unsent by a close.
func (c *Connection) SetPredicate(p sink.Predicate) { c.adm.SetPredicate(c, p) }

// Predicate returns the installed predicate, or nil.
func (c *Connection) Predicate() sink.Predicate { return c.adm.Predicate() }

// Close stops reading requests and closes the connection once the replies
// already sent are written (a Stream being sent included: its remaining
// pieces still go out); replies to requests not answered yet are dropped.
func (c *Connection) Close() error {
	c.mu.Lock()
	c.stopReadingLocked()
	c.closing = true
	c.dropPendingLocked()
	c.unlock()
	return nil
}

// Abort closes the connection now, dropping unsent output.
func (c *Connection) Abort() error { return c.sock.Abort() }

func asReply(e sink.Event) (Reply, error) {
	switch v := e.(type) {
	case Reply:
		return v, nil
	case *Reply:
		if v != nil {
			return *v, nil
		}
	}
	return Reply{}, fmt.Errorf("%w: %T (want http.Reply)", ErrBadReply, e)
}

func finish(done func(error), err error) {
	if done != nil {
		done(err)
	}
}

// reply validates r and answers its request.
