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

// outWrite is a formatted response (or interim 100 Continue) waiting for
// room in the write window.
type outWrite struct {
	data []byte
	bufs [][]byte
	n    int
	done func(error)
}

// inflight is a write handed to the socket with a completion requested
// (a "marked" write), not yet written to the kernel.
type inflight struct {
	end  int64 // c.submitted just after it
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
	outq      ring[outWrite]
	inflight  ring[inflight] // marked writes not yet written to the kernel
	submitted int64          // bytes handed to the socket, ever
	confirmed int64          // bytes known to be written to the kernel
	stream    *Stream        // the streamed reply being sent: later replies wait
	streamAt  int64          // when the stream last got a piece
	closing   bool
	closeSent bool
	closed    bool
	reqStart  int64 // when the request being received began (0: none)
	lastAct   int64 // last traffic in or out
	lastWrite int64 // last write progress
	calls     []doneCall
	wreq      aio.WriteRequest // flushLocked's scratch
}

var _ sink.Sink = (*Connection)(nil)

func newConnection(s *Server, sock *aio.Connection) *Connection {
	now := sink.Nanotime()
	c := &Connection{srv: s, sock: sock, id: s.nextID.Add(1), lastAct: now, lastWrite: now}
	c.parser = Parser{Limits: s.cfg.Limits, ClassHeader: s.cfg.ClassHeader, Conn: c}
	return c
}

// ID is unique among the connections of a server.
func (c *Connection) ID() uint64 { return c.id }

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

func (c *Connection) onPacket(data []byte) {
	now := sink.Nanotime()
	c.mu.Lock()
	if c.closed || c.readDone {
		c.mu.Unlock()
		return
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
	if c.heldBytes > c.srv.cfg.MaxBuffered {
		c.stopReadingLocked()
		c.mu.Unlock()
		c.srv.stats.overflows.Add(1)
		c.srv.log.Debug("http: pipelined input over limit; closing", "conn", c.String())
		_ = c.sock.Abort()
		return
	}
	c.pump()
}

func (c *Connection) stopReadingLocked() {
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
		for _, r := range reqs {
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
			c.srv.stats.parseErrors.Add(1)
			c.srv.log.Debug("http: bad request", "conn", c.String(), "err", err)
			c.answerSelfLocked(ErrorResponse(err), now)
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
		c.flushLocked()
		return
	}
	c.wantCont, c.contSeq = true, c.nextIn
}

func (c *Connection) pushContinueLocked() {
	c.wantCont = false
	b := AppendContinue(nil)
	c.outq.push(outWrite{data: b, n: len(b)})
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

// Len is the number of replies queued and not yet written to the kernel.
func (c *Connection) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) + c.outq.len() + c.inflight.len()
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
	c.flushLocked()
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
	c.flushLocked()
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
	w.n = len(w.data)
	for _, b := range w.bufs {
		w.n += len(b)
	}
	c.outq.push(w)
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

// flushLocked hands queued output to the socket while the write window has
// room, and closes the connection after its last response.
//
// Only some writes ask the socket for a completion ("marked" writes): those
// whose buffers must be released after they are written, and those that
// bring the unconfirmed bytes past half the window. A completion confirms
// its write and every earlier one, so the window stays exact while the
// common case, a small response copied into its header's buffer, costs no
// completion event at all. A write the socket refuses as clogged waits for
// the next completion; with none in flight, a Flush provides one.
func (c *Connection) flushLocked() {
	window := int64(c.srv.cfg.WriteWindow)
	for c.outq.len() > 0 {
		w := c.outq.front()
		out := c.submitted - c.confirmed
		if c.inflight.len() > 0 && out+int64(w.n) > window {
			break // a completion will bring us back
		}
		// The socket copies a *WriteRequest's fields: one scratch value
		// per connection saves an allocation per write.
		req := &c.wreq
		*req = aio.WriteRequest{Data: w.data, Bufs: w.bufs}
		marked := w.done != nil || out+int64(w.n) > window/2
		if marked {
			req.Done = c.srv.drained
		}
		err := c.sock.Enqueue(req)
		*req = aio.WriteRequest{}
		if err != nil {
			if errors.Is(err, aio.ErrClogged) {
				if c.inflight.len() > 0 {
					break // a completion will bring us back
				}
				// What clogs the socket are unmarked writes (a header
				// queued just before, say): nothing the connection waits
				// for would bring it back, so ask for a completion once
				// they have drained, and retry then.
				if ferr := c.sock.Flush(c.srv.drained, nil); ferr == nil {
					c.lastWrite = sink.Nanotime()
					c.inflight.push(inflight{end: c.submitted})
					break
				}
			}
			c.failLocked(err)
			if !errors.Is(err, sink.ErrClosed) {
				_ = c.sock.Abort()
			}
			return
		}
		c.submitted += int64(w.n)
		if marked {
			if c.inflight.len() == 0 {
				c.lastWrite = sink.Nanotime()
			}
			c.inflight.push(inflight{end: c.submitted, done: w.done})
		}
		c.outq.pop()
	}
	if c.outq.len() == 0 && c.closing && !c.closeSent && c.stream == nil {
		c.closeSent = true
		_ = c.sock.Close()
	}
}

// failLocked drops everything queued: the connection cannot send.
func (c *Connection) failLocked(err error) {
	for c.outq.len() > 0 {
		w := c.outq.pop()
		c.srv.stats.dropped.Add(1)
		if w.done != nil {
			c.calls = append(c.calls, doneCall{w.done, err})
		}
	}
	for c.inflight.len() > 0 {
		w := c.inflight.pop()
		if w.done != nil {
			c.calls = append(c.calls, doneCall{w.done, err})
		}
	}
	c.confirmed = c.submitted
	c.dropStreamLocked(c.stream, err)
	c.closing = true
	c.stopReadingLocked()
	c.dropPendingLocked()
}

// unlock releases c.mu and then runs the Done callbacks collected under it.
func (c *Connection) unlock() {
	calls := c.calls
	c.calls = nil
	c.mu.Unlock()
	for _, d := range calls {
		finish(d.f, d.err)
	}
}

// ---- socket completions ----

func (c *Connection) onDrained() {
	now := sink.Nanotime()
	c.mu.Lock()
	if c.inflight.len() == 0 {
		c.mu.Unlock()
		return
	}
	w := c.inflight.pop()
	c.confirmed = w.end
	c.lastWrite, c.lastAct = now, now
	if c.stream != nil {
		c.streamAt = now
	}
	if w.done != nil {
		c.calls = append(c.calls, doneCall{w.done, nil})
	}
	c.flushLocked()
	c.unlock()
}

func (c *Connection) onWriteFailed(err error) {
	c.mu.Lock()
	if c.inflight.len() > 0 {
		w := c.inflight.pop()
		if w.done != nil {
			c.calls = append(c.calls, doneCall{w.done, err})
		}
	}
	c.unlock()
}

func (c *Connection) onClosed(ev aio.SinkClosed) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	err := c.closedErr()
	if ev.Err != nil {
		err = fmt.Errorf("%w (%s: %w)", err, ev.Reason, ev.Err)
	}
	c.failLocked(err)
	c.unlock()
	c.srv.remove(c)
}

// ---- timeouts (the server's timer goroutine) ----

func (c *Connection) checkTimeouts(now int64) {
	cfg := &c.srv.cfg
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	stats := &c.srv.stats
	switch {
	case cfg.WriteTimeout > 0 && c.inflight.len() > 0 && now-c.lastWrite > int64(cfg.WriteTimeout):
		c.mu.Unlock()
		stats.writeTimeouts.Add(1)
		c.srv.log.Debug("http: write timeout; closing", "conn", c.String())
		_ = c.sock.Abort()
		return
	case cfg.ResponseTimeout > 0 && c.stream != nil && c.outq.len() == 0 && c.inflight.len() == 0 &&
		now-max(c.streamAt, c.lastWrite) > int64(cfg.ResponseTimeout):
		// The application stopped feeding a streamed body: the response
		// cannot be completed, nor another one sent after it.
		c.mu.Unlock()
		stats.responseTimeouts.Add(1)
		c.srv.log.Warn("http: streamed body stalled; closing", "conn", c.String(), "timeout", cfg.ResponseTimeout)
		_ = c.sock.Abort()
		return
	case cfg.ResponseTimeout > 0 && !c.closing && c.stream == nil && c.delivered > c.nextOut && now-c.waitq.front().at > int64(cfg.ResponseTimeout):
		stats.responseTimeouts.Add(1)
		head := c.waitq.front().req
		resp := ServiceUnavailable(cfg.RetryAfter)
		resp.Close = true
		c.srv.log.Warn("http: request not answered in time", "conn", c.String(), "timeout", cfg.ResponseTimeout)
		c.emitLocked(Reply{Req: head, Resp: resp})
		c.flushLocked()
	case cfg.RequestTimeout > 0 && !c.readDone && c.reqStart != 0 && len(c.held) == 0 && c.ready.len() == 0 && now-c.reqStart > int64(cfg.RequestTimeout):
		stats.requestTimeouts.Add(1)
		c.stopReadingLocked()
		resp := StatusResponse(StatusRequestTimeout)
		resp.Close = true
		c.answerSelfLocked(resp, now)
	case c.idleLocked() && (c.srv.draining.Load() || c.idleTimeout() > 0 && now-c.lastAct > int64(c.idleTimeout())):
		stats.idleClosed.Add(1)
		c.stopReadingLocked()
		c.closing, c.closeSent = true, true
		c.mu.Unlock()
		_ = c.sock.Close()
		return
	}
	c.unlock()
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
	return c.nextIn != c.nextOut || c.outq.len() > 0 || c.inflight.len() > 0 || c.stream != nil
}

// drain winds the connection down for a server shutdown: it reads no
// more, dropping a request partly received (no response is owed for it),
// and closes the connection at once if it owes no response; otherwise the
// responses it owes go out, the last one closing it (Server.Draining
// makes every response close).
func (c *Connection) drain() {
	c.mu.Lock()
	if c.closed || c.closeSent {
		c.mu.Unlock()
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
