package http

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is a Connection's request side (pipeline): what the socket's
// event loop runs when bytes arrive, and the pump that parses them and
// hands the requests to the application.

// onPacket takes the bytes of a packet that arrived at sink.Nanotime
// reading at (0: unknown, the clock is read). lent says data is only
// valid during the call (aio.PacketBorrower): it is parsed at once, or
// copied when it must wait (the pipeline is full or another goroutine is
// pumping). HTTP/2 copies what it keeps (the frame reader's input, the
// preface sniffer's held bytes) before it returns.
func (c *Connection) onPacket(data []byte, at int64, lent bool) error {
	// A lent packet comes straight from the event loop's read: its
	// arrival reading is fresh enough for Date. Another may have waited
	// (refused, queued), so the wall clock is read for it.
	fresh := lent
	data, h2, err := c.protoPacket(data)
	if h2 {
		return err
	}
	now := at
	if now == 0 {
		now = sink.Nanotime()
	}
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
	if lent && (c.pumping || c.closing || len(c.held) > 0 || c.ready.Len() > 0) {
		// Not parsed in this call: the held bytes must be ours. (Otherwise
		// pump's first round feeds them to the parser, which copies what
		// it keeps.)
		data = bytes.Clone(data)
	}
	c.lastAct = now
	if fresh {
		c.wall = wallAt(now)
	} else {
		c.wall = time.Now()
	}
	c.mono = now
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
	c.pump(now)
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
// ready is empty. It is called with c.mu held and releases it. now is
// the caller's sink.Nanotime reading, taken just before (0: none): it
// stamps the first input parsed, and later rounds (after the application
// ran) read the clock again.
func (c *Connection) pump(now int64) {
	if c.pumping {
		c.unlock()
		return
	}
	c.pumping = true
	limit := int64(c.srv.cfg.MaxPipeline)
	for !c.closed {
		if c.closing {
			c.ready = fifo[*Request]{} // the connection closes: nobody will read the answers
			break
		}
		if room := limit - int64(c.delivered-c.nextOut); room > 0 && c.ready.Len() > 0 {
			batch := c.batch[:0]
			for range min(room, int64(c.ready.Len())) {
				r, _ := c.ready.Pop()
				batch = append(batch, r)
			}
			c.delivered += uint64(len(batch))
			c.batch = batch
			c.mu.Unlock()
			c.deliver(batch)
			c.mu.Lock()
			c.recycleLocked(batch)
			clear(batch)
			now, c.wall, c.mono = 0, time.Time{}, 0 // the application ran: read the clocks again
			continue
		}
		if c.ready.Len() > 0 || c.readDone || len(c.held) == 0 {
			break
		}
		data := c.held[0]
		c.held[0] = nil
		c.held = c.held[1:]
		if len(c.held) == 0 {
			c.held = c.heldBuf[:0] // reuse the backing array
		}
		c.heldBytes -= len(data)
		c.parser.at = c.wall // zero after a delivery round: Now is asked
		reqs, err := c.parser.Feed(c.scratch[:0], data)
		c.parser.at = time.Time{}
		if now == 0 {
			now = sink.Nanotime()
		}
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
			c.waitq.Push(waiting{req: r, at: now})
			c.ready.Push(r)
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
	c.wall, c.mono = time.Time{}, 0
	c.unlock()
}

// wallNow is the wall clock for a request's Received and a reply's Date:
// the arriving packet's reading while it is pumped, else a fresh one. It
// is called with c.mu held.
func (c *Connection) wallNow() time.Time {
	if !c.wall.IsZero() {
		return c.wall
	}
	return time.Now()
}

// deliver hands parsed requests to the application; a refusal is answered
// with 503 at once. Only the pumping goroutine calls it, so requests reach
// the application in order. It leaves in reqs only the requests the
// Inline hook answered (the others are set to nil): the ones recycleLocked
// may take back.
func (c *Connection) deliver(reqs []*Request) {
	srv := c.srv
	for i, r := range reqs {
		reqs[i] = nil
		srv.stats.requests.Add(1)
		if c.overLimit {
			resp := ServiceUnavailable(srv.cfg.RetryAfter)
			resp.Close = true
			_ = c.reply(Reply{Req: r, Resp: resp})
			continue
		}
		if cp := srv.cfg.Clients; cp != nil {
			r.SetPrincipal(c.clientPrincipal(cp, r))
		}
		if f := srv.cfg.Principal; f != nil {
			r.SetPrincipal(f(r))
		}
		if f := srv.cfg.Inline; f != nil && f(r) {
			reqs[i] = r
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

// recycleLocked gives the parser back the memory of a request the Inline
// hook answered (from deliver's reqs) when nothing can refer to it any
// more: the server says its Inline hook keeps nothing of the requests it
// answers (RecycleInline), its answer has been emitted (not waiting for
// an earlier one), no OnResponse was handed its strings, no admission
// predicate holds its reply until written, and it has no context of its
// own. The next request parsed then reuses warm memory instead of a new
// allocation.
func (c *Connection) recycleLocked(reqs []*Request) {
	if !c.srv.cfg.RecycleInline || c.srv.cfg.OnResponse != nil {
		return
	}
	for _, r := range reqs {
		if r != nil && r.Seq < c.nextOut && r.ctx == nil && !r.heldByReply {
			c.parser.recycle(r)
		}
	}
}

// answerSelfLocked answers, in order, a pseudo-request the connection
// made up itself: a parse error or a request timeout.
func (c *Connection) answerSelfLocked(resp *Response, now int64) {
	seq := c.nextIn
	c.nextIn++
	c.delivered++
	c.waitq.Push(waiting{at: now})
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
	if c.writeLocked(outWrite{data: AppendContinue(nil)}) == nil {
		c.srv.stats.continues.Add(1)
	}
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

// clientPrincipal is the principal ID of r under the server's
// ClientPolicy: the peer's address, or the client a trusted proxy names.
func (c *Connection) clientPrincipal(cp *ClientPolicy, r *Request) any {
	if cp.From != PrincipalFromHeader {
		return c.principalValue
	}
	a := cp.Client(c.peer, r.Header)
	if a == c.peer {
		return c.principalValue
	}
	return a.String()
}
