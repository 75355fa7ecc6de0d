package http

import (
	"errors"
	"fmt"
	"net"
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
// of a streamed body) waiting to be handed to the socket, in order.
type outWrite struct {
	data []byte
	bufs [][]byte
	done func(error)
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

type predRef struct{ p sink.Predicate }

// Connection is an HTTP connection of a Server (Sandstorm's
// httpConnection). Every Request carries its Connection in Request.Conn.
// A Connection is a sink.Sink of Reply events: enqueue the answer to each
// request and the Connection sends them in request order, formatting the
// header inline with the server's shared Formatter, and closes itself
// after a response that does not keep the connection alive. Enqueue never
// blocks and never rejects a valid reply while the connection is open.
//
// A Connection parses requests and puts the replies in order; it does not
// own the output: the aio.Connection underneath holds the write window,
// write completions, the write timeout and the output budget. Formatted
// replies are handed to it outside the Connection's lock, by one goroutine
// at a time, in order.
type Connection struct {
	srv       *Server
	sock      *aio.Connection
	id        uint64
	overLimit bool // beyond MaxConnections: every request gets 503, then close
	pred      atomic.Pointer[predRef]

	mu        sync.Mutex
	parser    Parser
	batch     []*Request // the pumping goroutine's scratch
	scratch   []*Request
	ready     ring[*Request] // parsed, not yet handed to the application
	delivered uint64         // requests handed out (or answered by the connection)
	held      [][]byte       // received bytes not yet parsed (pipeline full)
	heldBuf   [][]byte       // held's backing array while it is short
	heldBytes int
	pumping   bool
	readDone  bool // no more requests will be read
	nextIn    uint64
	nextOut   uint64
	waitq     ring[waiting]
	pending   map[uint64]Reply // answers waiting for earlier ones
	wantCont  bool             // a 100 Continue is due once nextOut reaches contSeq
	contSeq   uint64
	outq      []outWrite // formatted, not yet handed to the socket
	spare     []outWrite // the flushing goroutine's previous outq
	flushing  bool       // a goroutine hands outq to the socket
	stream    *Stream    // the streamed reply being sent: later replies wait
	streamAt  int64      // when the stream last got a piece
	closing   bool
	closeSent bool
	closed    bool
	aborted   bool  // a timeout aborted the socket: its SinkClosed is due
	linger    bool  // close with a lingering close: input may be left unread
	bodies    int64 // request-body bytes held against the server's BodyBudget
	reqStart  int64 // when the request being received began (0: none)
	lastAct   int64 // last traffic in or out
	busyAt    int64 // when the timer last found output waiting to be written
	calls     []doneCall
}

var _ sink.Sink = (*Connection)(nil)

func newConnection(s *Server, sock *aio.Connection) *Connection {
	now := sink.Nanotime()
	c := &Connection{srv: s, sock: sock, id: s.nextID.Add(1), lastAct: now}
	c.parser = Parser{Limits: s.cfg.Limits, ClassHeader: s.cfg.ClassHeader, Conn: c,
		SkipBody: s.cfg.SkipBody, ReserveBody: c.reserveBody}
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

// String names the connection in logs.
func (c *Connection) String() string {
	return fmt.Sprintf("http.%s#%d(%v)", c.srv.cfg.Name, c.id, c.sock.RemoteAddr())
}

// Key implements stage.Keyed, so that a stage can handle the events of one
// connection in order.
func (c *Connection) Key() string { return c.String() }

// ---- reading (socket event loop) ----

func (c *Connection) onPacket(data []byte) error {
	now := sink.Nanotime()
	c.mu.Lock()
	if c.closed || c.readDone {
		// Input after the last request (or after an error) is discarded;
		// the close lingers so that it does not reset the connection.
		c.linger = true
		c.mu.Unlock()
		return nil
	}
	if c.heldBytes > 0 && c.heldBytes+len(data) > c.srv.cfg.MaxBuffered {
		// The pipeline is full and MaxBuffered bytes wait unparsed: refuse
		// the packet. The socket stops reading (TCP flow control holds the
		// client back) and offers it again later.
		c.mu.Unlock()
		c.srv.stats.overflows.Add(1)
		return errPipelineFull
	}
	c.lastAct = now
	if c.reqStart == 0 {
		c.reqStart = now
	}
	if c.held == nil {
		c.held = c.heldBuf[:0]
	}
	c.held = append(c.held, data)
	if cap(c.held) <= 4 {
		c.heldBuf = c.held[:0:cap(c.held)]
	}
	c.heldBytes += len(data)
	c.pump()
	return nil
}

var errPipelineFull = fmt.Errorf("http: pipeline full: %w", sink.ErrRejected)

func (c *Connection) stopReadingLocked() {
	if len(c.held) > 0 || !c.parser.Idle() {
		c.linger = true // input left unread
	}
	c.readDone = true
	c.held = nil
	c.heldBytes = 0
}

// pump parses held input and hands the requests to the application, one
// goroutine at a time, keeping at most MaxPipeline of them unanswered:
// parsed requests beyond that wait in ready, and input is parsed only when
// ready is empty. It is called with c.mu held and releases it.
func (c *Connection) pump() {
	if c.pumping {
		c.unlock()
		return
	}
	c.pumping = true
	limit := int64(c.srv.cfg.MaxPipeline)
	for !c.closed {
		if c.closing {
			c.ready = ring[*Request]{} // the connection closes: nobody will read the answers
			break
		}
		if room := limit - int64(c.delivered-c.nextOut); room > 0 && c.ready.len() > 0 {
			batch := c.batch[:0]
			for range min(room, int64(c.ready.len())) {
				batch = append(batch, c.ready.pop())
			}
			c.delivered += uint64(len(batch))
			c.batch = batch
			c.mu.Unlock()
			c.deliver(batch)
			clear(batch)
			c.mu.Lock()
			continue
		}
		if c.ready.len() > 0 || c.readDone || len(c.held) == 0 {
			break
		}
		data := c.held[0]
		c.held[0] = nil
		c.held = c.held[1:]
		if len(c.held) == 0 {
			c.held = c.heldBuf[:0] // reuse the backing array
		}
		c.heldBytes -= len(data)
		reqs, err := c.parser.Feed(c.scratch[:0], data)
		now := sink.Nanotime()
		for i, r := range reqs {
			if r.Method == "CONNECT" {
				// A tunnel is nothing this server can answer; the
				// connection must not stay open to carry other bytes.
				clear(reqs[i:])
				reqs = reqs[:i]
				err = &Error{Status: StatusBadRequest, Err: ErrMethod, Detail: "CONNECT is not supported"}
				break
			}
			c.nextIn++
			c.waitq.push(waiting{req: r, at: now})
			c.ready.push(r)
		}
		n := len(reqs)
		clear(reqs)
		c.scratch = reqs[:0]
		if c.parser.Closed() {
			c.stopReadingLocked()
		}
		if err != nil {
			c.stopReadingLocked()
			c.linger = true
			c.srv.stats.parseErrors.Add(1)
			c.srv.log.Debug("http: bad request", "conn", c.String(), "err", err)
			resp := ErrorResponse(err)
			if errors.Is(err, ErrBodyBudget) {
				resp = ServiceUnavailable(c.srv.cfg.RetryAfter)
				resp.Close = true
			}
			c.answerSelfLocked(resp, now)
		}
		if c.parser.TakeContinue() {
			c.continueLocked()
		}
		switch {
		case c.parser.Idle():
			c.reqStart = 0
		case n > 0 || c.reqStart == 0:
			c.reqStart = now
		}
	}
	c.pumping = false
	c.unlock()
}

// deliver hands parsed requests to the application; a refusal is answered
// with 503 at once. Only the pumping goroutine calls it, so requests reach
// the application in order.
func (c *Connection) deliver(reqs []*Request) {
	srv := c.srv
	for _, r := range reqs {
		srv.stats.requests.Add(1)
		if c.overLimit {
			resp := ServiceUnavailable(srv.cfg.RetryAfter)
			resp.Close = true
			_ = c.reply(Reply{Req: r, Resp: resp})
			continue
		}
		if f := srv.cfg.Principal; f != nil {
			r.SetPrincipal(f(r))
		}
		if f := srv.cfg.Inline; f != nil && f(r) {
			continue
		}
		if err := srv.requests.Enqueue(r); err != nil {
			srv.stats.rejected.Add(1)
			resp := ServiceUnavailable(srv.cfg.RetryAfter)
			if errors.Is(err, sink.ErrClosed) {
				resp.Close = true
			}
			_ = c.reply(Reply{Req: r, Resp: resp})
		}
	}
}

// answerSelfLocked answers, in order, a pseudo-request the connection
// made up itself: a parse error or a request timeout.
func (c *Connection) answerSelfLocked(resp *Response, now int64) {
	seq := c.nextIn
	c.nextIn++
	c.delivered++
	c.waitq.push(waiting{at: now})
	_ = c.answerLocked(seq, Reply{Resp: resp})
}

// continueLocked sends "100 Continue" for the request being received, or
// schedules it after the responses to the requests before it.
func (c *Connection) continueLocked() {
	if c.closing {
		return
	}
	if c.nextOut == c.nextIn && c.stream == nil {
		c.pushContinueLocked()
		return
	}
	c.wantCont, c.contSeq = true, c.nextIn
}

func (c *Connection) pushContinueLocked() {
	c.wantCont = false
	c.outq = append(c.outq, outWrite{data: AppendContinue(nil)})
	c.srv.stats.continues.Add(1)
}

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
	if p := c.pred.Load(); p != nil && !p.p.Accept(e) {
		err := &sink.RejectError{Sink: c.String(), Predicate: sink.PredicateName(p.p), Reason: "admission refused"}
		finish(r.Done, err)
		return err
	}
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
	if p := c.pred.Load(); p != nil && !p.p.Accept(r) {
		err := &sink.RejectError{Sink: c.String(), Predicate: sink.PredicateName(p.p), Reason: "admission refused"}
		finish(r.Done, err)
		return err
	}
	return c.reply(*r)
}

// EnqueueMany queues every reply of es, or none if one is not a valid
// Reply or the predicate refuses one.
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

// Prepare checks es (valid replies the predicate admits); Commit sends
// them. A Connection reserves nothing: it never refuses a valid reply for
// lack of room.
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

func (t *replyTxn) Abort() { t.once.Do(func() {}) }

func (c *Connection) admit(es []sink.Event) ([]Reply, error) {
	rs := make([]Reply, 0, len(es))
	for _, e := range es {
		r, err := asReply(e)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	if p := c.pred.Load(); p != nil {
		for _, e := range es {
			if !p.p.Accept(e) {
				return nil, &sink.RejectError{Sink: c.String(), Predicate: sink.PredicateName(p.p), Reason: "admission refused"}
			}
		}
	}
	return rs, nil
}

// Len is the number of replies waiting for earlier ones or for their turn
// to be handed to the socket (the socket counts what it has not written:
// Socket().Len()).
func (c *Connection) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) + len(c.outq)
}

// SetPredicate installs an admission predicate run on every enqueued reply
// (nil: none).
func (c *Connection) SetPredicate(p sink.Predicate) {
	if p == nil {
		c.pred.Store(nil)
		return
	}
	c.pred.Store(&predRef{p})
}

// Predicate returns the installed predicate, or nil.
func (c *Connection) Predicate() sink.Predicate {
	if p := c.pred.Load(); p != nil {
		return p.p
	}
	return nil
}

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
func (c *Connection) reply(r Reply) error {
	if err := c.check(r); err != nil {
		finish(r.Done, err)
		return err
	}
	c.mu.Lock()
	err := c.answerLocked(r.Req.Seq, r)
	if (c.ready.len() > 0 || len(c.held) > 0 && !c.readDone) && !c.pumping {
		c.pump() // the pipeline has room again
		return err
	}
	c.unlock()
	return err
}

func (c *Connection) check(r Reply) error {
	switch {
	case r.Req == nil:
		return fmt.Errorf("%w: no request", ErrBadReply)
	case r.Resp == nil:
		return fmt.Errorf("%w: no response", ErrBadReply)
	case r.Req.Conn != c:
		return fmt.Errorf("%w: request of connection %v answered on %s", ErrBadReply, r.Req.Conn, c)
	}
	if s := r.Stream; s != nil {
		switch {
		case s.c != c:
			return fmt.Errorf("%w: stream of another connection", ErrBadReply)
		case r.Resp.Body != nil || r.Body != nil:
			return fmt.Errorf("%w: a streamed reply with a body", ErrBadReply)
		case s.length != max(r.Resp.ContentLength, 0):
			return fmt.Errorf("%w: stream of %d bytes for Content-Length %d", ErrBadReply, s.length, r.Resp.ContentLength)
		}
		return nil
	}
	if r.Resp.Body == nil && r.Resp.SendsBody(r.Req) {
		var n int64
		for _, b := range r.Body {
			n += int64(len(b))
		}
		if n != max(r.Resp.ContentLength, 0) {
			return fmt.Errorf("%w: body of %d bytes for Content-Length %d", ErrBadReply, n, r.Resp.ContentLength)
		}
	}
	return nil
}

func (c *Connection) closedErr() error {
	return fmt.Errorf("http: connection closed: %w", &sink.ClosedError{Sink: c.String()})
}

// answerLocked records the answer to request seq and sends every answer
// now in order.
func (c *Connection) answerLocked(seq uint64, r Reply) error {
	if s := r.Stream; s != nil {
		if s.bound {
			err := fmt.Errorf("%w: a stream sent with two replies", ErrBadReply)
			c.calls = append(c.calls, doneCall{r.Done, err})
			return err
		}
		s.bound = true
	}
	var err error
	switch {
	case c.closed:
		c.dropLocked(r, c.closedErr())
		return c.closedErr()
	case seq < c.nextOut || seq >= c.nextIn:
		err = fmt.Errorf("%w: request %d of %s is answered already or unknown", ErrBadReply, seq, c)
	case seq != c.nextOut || c.stream != nil:
		if _, dup := c.pending[seq]; dup {
			err = fmt.Errorf("%w: request %d of %s answered twice", ErrBadReply, seq, c)
			break
		}
		if c.pending == nil {
			c.pending = make(map[uint64]Reply)
		}
		c.pending[seq] = r
		return nil
	}
	if err != nil {
		c.calls = append(c.calls, doneCall{r.Done, err})
		c.dropStreamLocked(r.Stream, err)
		return err
	}
	c.emitLocked(r)
	c.emitPendingLocked()
	return nil
}

// emitPendingLocked emits the answers that waited for earlier ones, in
// order, until one is missing or a stream is being sent.
func (c *Connection) emitPendingLocked() {
	for c.stream == nil && len(c.pending) > 0 {
		next, ok := c.pending[c.nextOut]
		if !ok {
			break
		}
		delete(c.pending, c.nextOut)
		c.emitLocked(next)
	}
}

func (c *Connection) dropLocked(r Reply, err error) {
	c.srv.stats.dropped.Add(1)
	c.dropStreamLocked(r.Stream, err)
	if r.Done != nil {
		c.calls = append(c.calls, doneCall{r.Done, err})
	}
}

func (c *Connection) dropPendingLocked() {
	err := fmt.Errorf("http: %s closed before the reply was sent: %w", c, &sink.ClosedError{Sink: c.String()})
	for seq, r := range c.pending {
		delete(c.pending, seq)
		c.dropLocked(r, err)
	}
	c.wantCont = false
}

// emitLocked formats the answer to request nextOut into the output queue.
func (c *Connection) emitLocked(r Reply) {
	c.nextOut++
	if c.waitq.len() > 0 {
		c.waitq.pop()
	}
	if c.closing {
		c.dropLocked(r, fmt.Errorf("http: %s is closing: %w", c, &sink.ClosedError{Sink: c.String()}))
		return
	}
	srv := c.srv
	req, resp := r.Req, r.Resp
	if s := r.Stream; s != nil && s.err != nil {
		// Aborted before its turn: nothing of it was sent yet.
		resp = InternalServerError()
		resp.Close = true
		r.Stream = nil
	}
	if (c.overLimit || srv.draining.Load()) && resp.KeepAlive(req) {
		cp := *resp
		cp.Close = true
		resp = &cp
	}
	if req != nil {
		c.releaseBodyLocked(req)
	}
	now := time.Now()
	inline := srv.cfg.InlineBody
	sends := resp.SendsBody(req)
	var w outWrite
	switch {
	case !sends:
		w.data = srv.format.AppendHeader(make([]byte, 0, headerSize(resp)), resp, req, now)
		c.calls = append(c.calls, doneCall{r.Done, nil})
	case r.Stream != nil:
		w.data = srv.format.AppendHeader(make([]byte, 0, headerSize(resp)), resp, req, now)
		c.calls = append(c.calls, doneCall{r.Done, nil})
	case resp.Body != nil && len(resp.Body) <= inline:
		w.data = srv.format.Append(make([]byte, 0, headerSize(resp)+len(resp.Body)), resp, req, now)
		c.calls = append(c.calls, doneCall{r.Done, nil})
	case resp.Body != nil:
		w.data = srv.format.AppendHeader(make([]byte, 0, headerSize(resp)), resp, req, now)
		w.bufs = [][]byte{resp.Body}
		w.done = r.Done
	case resp.ContentLength <= int64(inline):
		buf := srv.format.AppendHeader(make([]byte, 0, headerSize(resp)+int(resp.ContentLength)), resp, req, now)
		for _, b := range r.Body {
			buf = append(buf, b...)
		}
		w.data = buf
		c.calls = append(c.calls, doneCall{r.Done, nil})
	default:
		w.data = srv.format.AppendHeader(make([]byte, 0, headerSize(resp)), resp, req, now)
		w.bufs = r.Body
		w.done = r.Done
	}
	c.outq = append(c.outq, w)
	c.lastAct = sink.Nanotime()
	srv.stats.responses.Add(1)
	if class := resp.status() / 100; class >= 1 && class <= 5 {
		srv.stats.byClass[class].Add(1)
	}
	if r.Stream != nil {
		c.startStreamLocked(r.Stream, sends)
	}
	if !resp.KeepAlive(req) {
		c.closing = true
		c.stopReadingLocked()
		c.dropPendingLocked()
		return
	}
	if c.wantCont && c.contSeq == c.nextOut && c.stream == nil {
		c.pushContinueLocked()
	}
}

func headerSize(r *Response) int { return 160 + 40*len(r.Header) }

// failLocked drops everything queued: the connection cannot send.
func (c *Connection) failLocked(err error) {
	for _, w := range c.outq {
		c.srv.stats.dropped.Add(1)
		if w.done != nil {
			c.calls = append(c.calls, doneCall{w.done, err})
		}
	}
	clear(c.outq)
	c.outq = c.outq[:0]
	c.dropStreamLocked(c.stream, err)
	c.closing = true
	c.stopReadingLocked()
	c.dropPendingLocked()
}

// unlock hands the formatted output to the socket, in order and outside
// c.mu (one goroutine at a time: whoever finds output queued and nobody
// flushing), closes the connection after its last response, releases
// c.mu and then runs the Done callbacks collected under it.
func (c *Connection) unlock() {
	for len(c.outq) > 0 && !c.flushing && !c.closed {
		c.flushing = true
		ws := c.outq
		c.outq = c.spare[:0]
		c.mu.Unlock()
		var err error
		i := 0
		for ; i < len(ws); i++ {
			w := &ws[i]
			if err = c.sock.Write(w.data, w.bufs, w.done); err != nil {
				break
			}
		}
		c.mu.Lock()
		c.flushing = false
		if err != nil {
			// The socket closed under us: what was not handed over fails.
			for _, w := range ws[i:] {
				c.srv.stats.dropped.Add(1)
				if w.done != nil {
					c.calls = append(c.calls, doneCall{w.done, err})
				}
			}
			c.failLocked(err)
		}
		clear(ws)
		c.spare = ws[:0]
	}
	closeNow := false
	if len(c.outq) == 0 && !c.flushing && c.closing && !c.closeSent && c.stream == nil && !c.closed {
		c.closeSent = true
		closeNow = true
	}
	linger := c.linger
	calls := c.calls
	c.calls = nil
	c.mu.Unlock()
	if closeNow {
		if linger {
			_ = c.sock.Linger()
		} else {
			_ = c.sock.Close()
		}
	}
	for _, d := range calls {
		finish(d.f, d.err)
	}
}

// ---- socket events ----

func (c *Connection) onClosed(ev aio.SinkClosed) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	if ev.Reason == aio.ClosedWriteTimeout {
		c.srv.stats.writeTimeouts.Add(1)
	}
	err := c.closedErr()
	if ev.Err != nil {
		err = fmt.Errorf("%w (%s: %w)", err, ev.Reason, ev.Err)
	}
	c.failLocked(err)
	c.releaseBodiesLocked()
	c.unlock()
	c.srv.remove(c)
}

// ---- timeouts (the server's timer goroutine) ----

func (c *Connection) checkTimeouts(now int64) {
	cfg := &c.srv.cfg
	// Asked before taking c.mu: no lock is held across a call into aio.
	unsent := c.sock.Len() > 0
	c.mu.Lock()
	if c.closed || c.aborted {
		c.mu.Unlock()
		return
	}
	stats := &c.srv.stats
	busy := unsent || len(c.outq) > 0 || c.flushing
	if busy {
		c.busyAt = now
	}
	if c.stream != nil && busy {
		c.streamAt = now // the client is still taking the pieces: not a stall
	}
	switch {
	case cfg.ResponseTimeout > 0 && c.stream != nil && len(c.outq) == 0 && !unsent &&
		now-c.streamAt > int64(cfg.ResponseTimeout):
		// The application stopped feeding a streamed body: the response
		// cannot be completed, nor another one sent after it.
		c.aborted = true
		c.mu.Unlock()
		stats.responseTimeouts.Add(1)
		c.srv.log.Warn("http: streamed body stalled; closing", "conn", c.String(), "timeout", cfg.ResponseTimeout)
		_ = c.sock.Abort()
		return
	case cfg.ResponseTimeout > 0 && !c.closing && c.stream == nil && c.delivered > c.nextOut && !busy &&
		now-max(c.waitq.front().at, c.busyAt) > int64(cfg.ResponseTimeout):
		// Unanswered for ResponseTimeout while the connection had nothing
		// to write: an application may hold an answer until the client
		// has taken the ones before it (Haboob's streamed files do).
		stats.responseTimeouts.Add(1)
		head := c.waitq.front().req
		resp := ServiceUnavailable(cfg.RetryAfter)
		resp.Close = true
		c.srv.log.Warn("http: request not answered in time", "conn", c.String(), "timeout", cfg.ResponseTimeout)
		c.emitLocked(Reply{Req: head, Resp: resp})
	case cfg.RequestTimeout > 0 && !c.readDone && c.reqStart != 0 && len(c.held) == 0 && c.ready.len() == 0 && now-c.reqStart > int64(cfg.RequestTimeout):
		stats.requestTimeouts.Add(1)
		c.stopReadingLocked()
		c.linger = true
		resp := StatusResponse(StatusRequestTimeout)
		resp.Close = true
		c.answerSelfLocked(resp, now)
	case !unsent && c.idleLocked() && (c.srv.draining.Load() || c.idleTimeout() > 0 && now-c.lastAct > int64(c.idleTimeout())):
		stats.idleClosed.Add(1)
		c.stopReadingLocked()
		c.closing, c.closeSent = true, true
		c.mu.Unlock()
		_ = c.sock.Close()
		return
	}
	c.unlock()
}

// onTimer is the connection's periodic visit (aio.TimerExpired): check
// the timeouts and set the next visit, on the server's tick, so that all
// connections share the socket's maintenance wake-ups.
func (c *Connection) onTimer() {
	c.checkTimeouts(sink.Nanotime())
	c.armTimer()
}

func (c *Connection) armTimer() {
	iv := int64(c.srv.cfg.TimerInterval)
	now := sink.Nanotime()
	c.sock.SetTimer(time.Duration(iv - now%iv))
}

// idleTimeout is how long the connection may stay idle: a connection beyond
// MaxConnections gets no longer than a request may take to arrive.
func (c *Connection) idleTimeout() time.Duration {
	cfg := &c.srv.cfg
	if c.overLimit && cfg.RequestTimeout > 0 && (cfg.IdleTimeout <= 0 || cfg.RequestTimeout < cfg.IdleTimeout) {
		return cfg.RequestTimeout
	}
	return cfg.IdleTimeout
}

// idleLocked reports a connection with nothing to do: no request arriving,
// waiting for an answer or being written.
func (c *Connection) idleLocked() bool {
	return !c.closeSent && c.reqStart == 0 && len(c.held) == 0 && !c.owesLocked()
}

// owesLocked reports whether the connection has a response to send or
// being sent: a request received and not answered, output not yet written
// to the kernel, or a streamed body not complete.
func (c *Connection) owesLocked() bool {
	return c.nextIn != c.nextOut || len(c.outq) > 0 || c.flushing || c.stream != nil
}

// drain winds the connection down for a server shutdown: it reads no
// more, dropping a request partly received (no response is owed for it),
// and closes the connection at once if it owes no response; otherwise the
// responses it owes go out, the last one closing it (Server.Draining
// makes every response close).
func (c *Connection) drain() {
	c.mu.Lock()
	if c.closed || c.closeSent {
		lingering := c.closeSent && !c.closed && c.linger
		c.mu.Unlock()
		if lingering {
			_ = c.sock.Close() // a shutdown does not wait for lingering closes
		}
		return
	}
	c.stopReadingLocked()
	c.reqStart = 0
	c.wantCont = false
	if c.owesLocked() {
		c.mu.Unlock()
		return
	}
	c.closing, c.closeSent = true, true
	c.mu.Unlock()
	_ = c.sock.Close()
}

// ring is a FIFO queue.
type ring[T any] struct {
	buf  []T
	head int
}

func (r *ring[T]) len() int { return len(r.buf) - r.head }

func (r *ring[T]) front() *T { return &r.buf[r.head] }

func (r *ring[T]) push(v T) {
	if r.head > 0 && r.head >= len(r.buf)/2 {
		n := copy(r.buf, r.buf[r.head:])
		clear(r.buf[n:])
		r.buf, r.head = r.buf[:n], 0
	}
	r.buf = append(r.buf, v)
}

func (r *ring[T]) pop() T {
	v := r.buf[r.head]
	var zero T
	r.buf[r.head] = zero
	r.head++
	if r.head == len(r.buf) {
		r.buf, r.head = r.buf[:0], 0
	}
	return v
}

// ---- request bodies (the server's BodyBudget) ----

// reserveBody is the Parser's ReserveBody (called under c.mu): n more
// body bytes for r, within the server's budget or this connection's fair
// share of it.
func (c *Connection) reserveBody(r *Request, n int64) bool {
	srv := c.srv
	budget := srv.cfg.BodyBudget
	if budget < 0 {
		return true
	}
	used := srv.stats.bodyBytes.Add(n)
	if used > budget {
		srv.mu.Lock()
		open := max(srv.open, 1)
		srv.mu.Unlock()
		if c.bodies+n > max(budget/int64(open), minBodyShare) {
			srv.stats.bodyBytes.Add(-n)
			srv.stats.bodyRejected.Add(1)
			srv.log.Debug("http: request body over budget", "conn", c.String(), "bytes", n, "buffered", used-n)
			return false
		}
	}
	c.bodies += n
	return true
}

// releaseBodyLocked returns the budget held by the body of req, which is
// being answered.
func (c *Connection) releaseBodyLocked(req *Request) {
	if n := min(int64(len(req.Body)), c.bodies); n > 0 {
		c.bodies -= n
		c.srv.stats.bodyBytes.Add(-n)
	}
}

// releaseBodiesLocked returns all the budget the connection holds (it
// closed).
func (c *Connection) releaseBodiesLocked() {
	if c.bodies > 0 {
		c.srv.stats.bodyBytes.Add(-c.bodies)
		c.bodies = 0
	}
}
