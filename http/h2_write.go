package http

import (
	"fmt"
	"maps"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is an HTTP/2 connection's output owner: the answers to its
// streams, their HEADERS encoded with the connection's one HPACK encoder,
// and their DATA interleaved across streams (one frame per stream per
// turn, round robin) within each stream's and the connection's send
// windows. It writes straight into the socket's outbox, like HTTP/1.1,
// but holds at most maxInflight bytes of DATA there: the rest waits by
// reference in each stream's body until written bytes make room, so a
// stream's turn comes back soon whatever the others send.

// h2Body is where a stream's DATA comes from. The output owner asks it
// for bytes when the stream's turn comes and both windows have room; the
// bytes are written by reference, and each piece's completion runs once
// its last byte is written to the kernel (or dropped). The bodies are
// pieces (pieceBody): a response's in-memory body, a cached page's
// buffers, a Stream's pieces as the application writes them; and a file
// region (fileBody, h2_file.go), read with pread a chunk at a time, at
// most two chunks held.
type h2Body interface {
	// ready is how many bytes take can hand out now.
	ready() int
	// pending reports that bytes of the body are waiting to be taken (as
	// ready, without reading anything ahead).
	pending() bool
	// take appends up to n ready bytes to bufs and the completions of
	// the pieces it finished to dones; it returns how many it took.
	take(bufs [][]byte, dones []func(error), n int) ([][]byte, []func(error), int)
	// done reports that every byte of the body was taken.
	done() bool
	// fail drops what is not taken: the completions get err (appended to
	// calls, run once the connection's lock is released).
	fail(calls []doneCall, err error) []doneCall
}

// pieceBody is a body of pieces handed over whole: a queue, the head
// piece taken from off.
type pieceBody struct {
	pieces   []outWrite
	off      int
	left     int64       // bytes of the body not taken yet
	buffered int         // bytes queued and not taken
	one      [1]outWrite // the first piece's room: most bodies are one piece
}

func (p *pieceBody) push(b []byte, done func(error)) {
	if p.pieces == nil {
		p.pieces = p.one[:0]
	}
	p.pieces = append(p.pieces, outWrite{data: b, done: done})
	p.buffered += len(b)
}

func (p *pieceBody) ready() int    { return p.buffered }
func (p *pieceBody) pending() bool { return p.buffered > 0 }
func (p *pieceBody) done() bool    { return p.left <= 0 }

func (p *pieceBody) take(bufs [][]byte, dones []func(error), n int) ([][]byte, []func(error), int) {
	took := 0
	for len(p.pieces) > 0 {
		w := &p.pieces[0]
		if rest := w.data[p.off:]; len(rest) > 0 {
			if took == n {
				break
			}
			k := min(len(rest), n-took)
			bufs = append(bufs, rest[:k])
			took += k
			p.off += k
			if k < len(rest) {
				break
			}
		}
		if w.done != nil {
			dones = append(dones, w.done)
		}
		p.pieces[0] = outWrite{}
		p.pieces = p.pieces[1:]
		p.off = 0
	}
	p.buffered -= took
	p.left -= int64(took)
	return bufs, dones, took
}

func (p *pieceBody) fail(calls []doneCall, err error) []doneCall {
	for _, w := range p.pieces {
		if w.done != nil {
			calls = append(calls, doneCall{w.done, err})
		}
	}
	p.pieces, p.buffered = nil, 0
	return calls
}

// reply answers one of the connection's streams (Connection.reply for
// HTTP/2).
func (h *h2Conn) reply(r Reply) error {
	c := h.c
	if err := c.check(r); err != nil {
		r.refuse(err)
		return err
	}
	c.mu.Lock()
	err := h.replyLocked(r)
	if !h.batching {
		h.flushLocked()
	}
	c.unlock()
	return err
}

func (h *h2Conn) replyLocked(r Reply) error {
	c := h.c
	if s := r.Stream; s != nil {
		if s.bound {
			err := fmt.Errorf("%w: a stream sent with two replies", ErrBadReply)
			c.calls = append(c.calls, doneCall{r.Done, err})
			return err
		}
		s.bound = true
	}
	st := h.streams[uint32(r.Req.Seq)]
	var err error
	switch {
	case h.closed || h.failed:
		err = c.closedErr()
	case st == nil || st.req != r.Req:
		err = fmt.Errorf("%w: stream %d of %s is answered already or unknown", ErrBadReply, r.Req.Seq, c)
	case st.replied:
		err = fmt.Errorf("%w: stream %d of %s answered twice", ErrBadReply, st.id, c)
	case st.reset:
		st.replied = true
		h.closeStreamLocked(st)
		err = fmt.Errorf("http: h2 stream %d of %s was reset: %w", st.id, c, &sink.ClosedError{Sink: c.String()})
	}
	if err != nil {
		c.srv.stats.dropped.Add(1)
		if s := r.Stream; s != nil && s.err == nil {
			s.err = err
			s.failPiecesLocked(err)
		}
		r.Resp.release()
		c.calls = append(c.calls, doneCall{r.Done, err})
		return err
	}
	h.emitLocked(st, r)
	if c.srv.draining.Load() {
		h.goAwayLocked()
	}
	return nil
}

// emitLocked sends the answer r on stream st: its HEADERS now, its body
// as the windows allow.
func (h *h2Conn) emitLocked(st *h2Stream, r Reply) {
	c := h.c
	srv := c.srv
	st.replied = true
	req, resp, s := r.Req, r.Resp, r.Stream
	if s != nil && s.err != nil {
		resp, s = InternalServerError(), nil // aborted before it was sent
	}
	c.releaseBodyLocked(req)
	sends := resp.SendsBody(req)
	length := resp.length()
	hasBody := sends && length > 0
	now := time.Now()
	h.writeHeadersLocked(st.id, resp, !hasBody, now)
	switch {
	case !hasBody:
		r.Resp.release() // HEAD, 304, an empty file: no file body to read
		h.outDones = appendDone(h.outDones, r.Done)
		if s != nil {
			s.emitted = true
			if !sends {
				s.err = fmt.Errorf("%w: the response has no body", ErrBadReply)
				s.failPiecesLocked(s.err)
			}
		}
	case s != nil:
		b := &pieceBody{left: length}
		s.emitted = true
		for _, w := range s.pieces {
			b.push(w.data, w.done)
		}
		s.pieces = nil
		st.body, st.stream = b, s
		h.bodies[s] = st
		h.outDones = appendDone(h.outDones, r.Done)
	case resp.File != nil:
		st.body = newFileBody(resp.File, r.Done)
	case resp.Body != nil:
		b := &pieceBody{left: length}
		b.push(resp.Body, r.Done)
		st.body = b
	default:
		b := &pieceBody{left: length}
		for i, buf := range r.Body {
			var done func(error)
			if i == len(r.Body)-1 {
				done = r.Done
			}
			b.push(buf, done)
		}
		st.body = b
	}
	srv.stats.responses.Add(1)
	if class := resp.status() / 100; class >= 1 && class <= 5 {
		srv.stats.byClass[class].Add(1)
	}
	if srv.cfg.OnResponse != nil {
		c.recordLocked(req, resp, sends, st.at, now)
	}
	if st.body == nil {
		h.endSentLocked(st)
	} else {
		h.scheduleLocked(st)
	}
	if !resp.KeepAlive(req) {
		h.goAwayLocked() // Close: no more streams on this connection
	}
}

func appendDone(dones []func(error), d func(error)) []func(error) {
	if d == nil {
		return dones
	}
	return append(dones, d)
}

// writeHeadersLocked encodes resp's header into HEADERS (and
// CONTINUATION) frames for stream id.
func (h *h2Conn) writeHeadersLocked(id uint32, resp *Response, endStream bool, now time.Time) {
	srv := h.c.srv
	h.hb.Reset()
	status := resp.status()
	enc := func(name, value string) {
		_ = h.enc.WriteField(hpack.HeaderField{Name: name, Value: value})
	}
	enc(":status", statusCode(status))
	if !resp.Header.Has("Date") {
		enc("date", h.dateLocked(now))
	}
	if !resp.Header.Has("Server") {
		name := srv.format.Server
		if name == "" {
			name = DefaultServer
		}
		enc("server", name)
	}
	for _, f := range resp.Header {
		rf, ok := responseFields[f.Name]
		if !ok {
			rf = responseFieldOf(h2FieldName(f.Name))
		}
		switch v := h2FieldValue(f.Value); {
		case rf.drop:
		case rf.neverIndexed != 0:
			h.hb.Write(appendNeverIndexed(h.hb.AvailableBuffer(), rf.neverIndexed, v))
		default:
			enc(rf.name, v)
		}
	}
	if !noBody(status) {
		h.hb.Write(appendContentLength(h.hb.AvailableBuffer(), resp.length()))
	}
	block := h.hb.Bytes()
	for first := true; first || len(block) > 0; first = false {
		frag := block[:min(len(block), h2FrameSize)]
		block = block[len(frag):]
		if first {
			_ = h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag,
				EndStream: endStream, EndHeaders: len(block) == 0})
		} else {
			_ = h.fr.WriteContinuation(id, len(block) == 0, frag)
		}
	}
	h.takeFramed()
}

// Values that differ from response to response (content-length, etag,
// last-modified, content-range) are not indexed: they would only churn
// the 4 KiB dynamic table. They are encoded here, as a "never indexed"
// literal (RFC 7541 §6.2.3) naming the field by its static table index,
// without the encoder's table search. The dynamic table is untouched, so
// the encoder's state stays right.
const (
	hpackNeverIndexed = 0x10 // the representation's bits, a 4-bit prefix index after them
	hpackHuffman      = 0x80 // a Huffman-coded string, its length in a 7-bit prefix
)

// appendNeverIndexed appends the field whose name has static table index
// name, with value v (Huffman-coded when that is shorter, as the encoder
// does).
func appendNeverIndexed(b []byte, name uint8, v string) []byte {
	b = appendHpackInt(b, hpackNeverIndexed, 4, uint64(name))
	if n := hpack.HuffmanEncodeLength(v); n < uint64(len(v)) {
		b = appendHpackInt(b, hpackHuffman, 7, n)
		return hpack.AppendHuffmanString(b, v)
	}
	b = appendHpackInt(b, 0, 7, uint64(len(v)))
	return append(b, v...)
}

// appendContentLength appends a content-length field of n, its digits as
// they are (no string made of them).
func appendContentLength(b []byte, n int64) []byte {
	const contentLength = 28 // static table index
	b = appendHpackInt(b, hpackNeverIndexed, 4, contentLength)
	at := len(b)
	b = append(b, 0) // the value's length: at most 19 digits, one byte
	b = strconv.AppendInt(b, n, 10)
	b[at] = byte(len(b) - at - 1)
	return b
}

// appendHpackInt appends n as an integer with a prefix of prefix bits
// (RFC 7541 §5.1), the first byte's other bits set to flags.
func appendHpackInt(b []byte, flags byte, prefix uint, n uint64) []byte {
	limit := uint64(1)<<prefix - 1
	if n < limit {
		return append(b, flags|byte(n))
	}
	b = append(b, flags|byte(limit))
	for n -= limit; n >= 128; n >>= 7 {
		b = append(b, byte(n&0x7f)|0x80)
	}
	return append(b, byte(n))
}

// dateLocked is the date field's value at now, made once a second per
// connection (AppendDate's cache holds bytes; the encoder wants a string).
func (h *h2Conn) dateLocked(now time.Time) string {
	if sec := now.Unix(); sec != h.dateSec || h.date == "" {
		var b [len(TimeFormat)]byte
		h.date, h.dateSec = string(h.c.srv.format.AppendDate(b[:0], now)), sec
	}
	return h.date
}

// statusCodes are the :status values of the codes from 100 to 599, made
// once.
var statusCodes = func() []string {
	codes := make([]string, 600)
	for i := 100; i < len(codes); i++ {
		codes[i] = strconv.Itoa(i)
	}
	return codes
}()

// statusCode is status as a :status value.
func statusCode(status int) string {
	if status >= 100 && status < len(statusCodes) {
		return statusCodes[status]
	}
	return strconv.Itoa(status)
}

// h2FieldName is a response field's name for HTTP/2: lower case, bytes
// that are not token bytes replaced by '_' (as the HTTP/1.1 formatter
// does).
func h2FieldName(name string) string {
	if validFieldName(name) {
		return name
	}
	if lower, ok := commonFieldNames[name]; ok {
		return lower
	}
	b := []byte(strings.ToLower(name))
	if len(b) == 0 {
		return "_"
	}
	for i, c := range b {
		if !isTokenByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

// neverIndexedNames are the static table indexes (RFC 7541 Appendix A)
// of the response fields whose values rarely repeat.
var neverIndexedNames = map[string]uint8{"content-length": 28, "content-range": 30, "etag": 34, "last-modified": 44}

// responseField is how a response field's name is encoded.
type responseField struct {
	name         string // lower case
	drop         bool   // not sent: a connection field (RFC 9113 §8.2.2), or content-length (made from the body)
	neverIndexed uint8  // the name's static table index when its values are not indexed
}

func responseFieldOf(name string) responseField {
	return responseField{name: name, drop: connectionFields[name] || name == "content-length",
		neverIndexed: neverIndexedNames[name]}
}

// responseFields are the encodings of the common response fields' names,
// as applications spell them and in lower case: one lookup per field.
var responseFields = map[string]responseField{}

// commonFieldNames are the lower-case forms of the response fields
// applications usually set, so that they cost no allocation.
var commonFieldNames = map[string]string{}

func init() {
	for _, n := range []string{"Content-Type", "Content-Encoding", "Content-Range", "Content-Language",
		"ETag", "Last-Modified", "Accept-Ranges", "Vary", "Cache-Control", "Expires", "Location",
		"Retry-After", "Set-Cookie", "Server", "Date", "Age", "Allow", "WWW-Authenticate"} {
		commonFieldNames[n] = strings.ToLower(n)
	}
	for n, lower := range commonFieldNames {
		responseFields[n] = responseFieldOf(lower)
		responseFields[lower] = responseFieldOf(lower)
	}
	for _, n := range append(slices.Collect(maps.Keys(connectionFields)), "content-length") {
		responseFields[n] = responseFieldOf(n)
		responseFields[textproto.CanonicalMIMEHeaderKey(n)] = responseFieldOf(n)
	}
}

// h2FieldValue replaces control bytes by spaces (as the HTTP/1.1
// formatter does).
func h2FieldValue(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			b := []byte(v)
			for j, c := range b {
				if c < ' ' && c != '\t' || c == 0x7f {
					b[j] = ' '
				}
			}
			return string(b)
		}
	}
	return v
}

// scheduleLocked puts st in the send queue if it has DATA to send and
// window for it.
func (h *h2Conn) scheduleLocked(st *h2Stream) {
	if st.queued || st.body == nil || st.reset || st.window <= 0 {
		return
	}
	if st.body.ready() > 0 {
		st.queued = true
		h.sendq.Push(st)
		return
	}
	if b, ok := st.body.(*fileBody); ok {
		switch {
		case b.err != nil:
			h.c.srv.log.Warn("http: h2 file body", "conn", h.c.String(), "stream", st.id, "err", b.err)
			h.resetLocked(st.id, http2.ErrCodeInternal)
		case b.waiting() && !st.fileWait:
			st.fileWait = true
			h.fileWaits = append(h.fileWaits, st)
		}
	}
}

// wakeFilesLocked schedules again the streams whose file body waited for
// its previous chunk to be written.
func (h *h2Conn) wakeFilesLocked() {
	waits := h.fileWaits
	h.fileWaits = nil
	for _, st := range waits {
		st.fileWait = false
		h.scheduleLocked(st)
	}
}

// flushLocked writes the pending control and HEADERS frames and, while
// the connection's window and the in-flight bound allow, one DATA frame
// per stream in turn, as one write into the socket's outbox.
func (h *h2Conn) flushLocked() {
	c := h.c
	if h.closed {
		return
	}
	// Room for the frames below: a header and a body piece or two per
	// stream in the send queue.
	bufs := make([][]byte, 0, 2+3*min(h.sendq.Len(), 32))
	if len(h.out) > 0 {
		bufs = append(bufs, h.out)
		h.out = nil
	}
	dones := h.outDones
	h.outDones = nil
	var hdrs []byte
	sent := 0
	for h.sendWindow > 0 && h.inflight+sent < h.maxInflight && !h.failed {
		st, ok := h.sendq.Pop()
		if !ok {
			break
		}
		st.queued = false
		if st.body == nil || st.reset {
			continue
		}
		n := int(min(int64(h2FrameSize), st.window, h.sendWindow, int64(st.body.ready())))
		if n <= 0 {
			h.scheduleLocked(st) // a file body waiting for a write, or that failed
			continue
		}
		if hdrs == nil {
			hdrs = make([]byte, 0, 9*32)
		}
		at := len(bufs)
		bufs = append(bufs, nil)
		var took int
		bufs, dones, took = st.body.take(bufs, dones, n)
		end := st.body.done()
		var flags http2.Flags
		if end {
			flags = http2.FlagDataEndStream
		}
		off := len(hdrs)
		hdrs = appendFrameHeader(hdrs, took, http2.FrameData, flags, st.id)
		bufs[at] = hdrs[off:len(hdrs):len(hdrs)]
		st.window -= int64(took)
		h.sendWindow -= int64(took)
		sent += took
		if end {
			h.endSentLocked(st)
		} else {
			h.scheduleLocked(st)
		}
	}
	if len(h.out) > 0 { // RST_STREAM after a response the client had not finished sending
		bufs = append(bufs, h.out)
		h.out = nil
	}
	dones = append(dones, h.outDones...)
	h.outDones = nil
	if len(bufs) == 0 {
		for _, d := range dones {
			c.calls = append(c.calls, doneCall{d, nil})
		}
		return
	}
	if sent > 0 {
		h.inflight += sent
		h.lastAct = sink.Nanotime()
	}
	var done func(error)
	if sent > 0 || len(dones) > 0 {
		done = func(err error) { h.written(sent, dones, err) }
	}
	c.srv.stats.h2.writes.Add(1)
	if err := c.sock.Write(nil, bufs, done); err != nil {
		h.inflight -= sent
		c.srv.stats.dropped.Add(1)
		for _, d := range dones {
			c.calls = append(c.calls, doneCall{d, err})
		}
		h.failStreamsLocked(err)
		return
	}
	if h.closeWhenDone() {
		// The client may still be sending (WINDOW_UPDATE, SETTINGS
		// acknowledgements): a lingering close does not reset what it has
		// not read yet.
		_ = c.sock.Linger()
	}
}

// written completes a write of flushLocked: sent DATA bytes left the
// outbox (or were dropped with err).
func (h *h2Conn) written(sent int, dones []func(error), err error) {
	for _, d := range dones {
		d(err)
	}
	if sent == 0 {
		return
	}
	c := h.c
	c.mu.Lock()
	h.inflight -= sent
	if err == nil {
		h.progressAt = sink.Nanotime()
		h.wakeFilesLocked()
		h.flushLocked()
	}
	c.unlock()
}

// appendFrameHeader appends the 9-byte header of a frame (RFC 9113 §4.1).
func appendFrameHeader(dst []byte, length int, t http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(dst, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

// endSentLocked notes that st's response is all written (END_STREAM).
func (h *h2Conn) endSentLocked(st *h2Stream) {
	st.sentEnd = true
	st.body = nil
	if s := st.stream; s != nil {
		delete(h.bodies, s)
		st.stream = nil
	}
	if !st.remoteClosed {
		// The answer is complete before the request (a body not read):
		// the client may stop sending (RFC 9113 §8.1).
		st.remoteClosed = true
		_ = h.fr.WriteRSTStream(st.id, http2.ErrCodeNo)
		h.takeFramed()
	}
	h.closeStreamLocked(st)
}

// resetLocked resets stream id with code (a stream error, or a refusal).
func (h *h2Conn) resetLocked(id uint32, code http2.ErrCode) {
	if h.failed {
		return
	}
	_ = h.fr.WriteRSTStream(id, code)
	h.takeFramed()
	if code != http2.ErrCodeRefusedStream {
		h.c.srv.stats.h2.resetsOut.Add(1)
	}
	if st := h.streams[id]; st != nil {
		st.remoteClosed, st.sentEnd = true, true
		h.dropStreamLocked(st, fmt.Errorf("%w (%s)", errStreamReset, code))
	}
	h.resetBudgetLocked()
}

// dropStreamLocked gives up on st's response. A stream whose request the
// application has and has not answered stays (and counts against
// MaxConcurrentStreams) until it does.
func (h *h2Conn) dropStreamLocked(st *h2Stream, err error) {
	c := h.c
	st.reset = true
	h.endContextLocked(st, err)
	if st.body != nil {
		c.calls = st.body.fail(c.calls, err)
		st.body = nil
	}
	if s := st.stream; s != nil {
		if s.err == nil {
			s.err = err
		}
		delete(h.bodies, s)
		st.stream = nil
	}
	if st.delivered && !st.replied {
		return
	}
	h.closeStreamLocked(st)
}

func (h *h2Conn) closeStreamLocked(st *h2Stream) {
	h.endContextLocked(st, ErrStreamDone)
	if h.streams[st.id] == st {
		delete(h.streams, st.id)
	}
	h.closeIfDoneLocked()
}

// closeIfDoneLocked closes a connection that sent or received GOAWAY once
// its last stream is done (the close waits for the bytes written).
func (h *h2Conn) closeIfDoneLocked() {
	if h.goneAway && len(h.streams) == 0 && !h.failed && !h.closed {
		h.failed = true // no more frames are read
		h.c.linger = true
	}
}

// closeWhenDone reports whether the output is complete and the socket
// should close after it.
func (h *h2Conn) closeWhenDone() bool {
	return h.goneAway && len(h.streams) == 0 && h.failed
}

// goAwayLocked sends GOAWAY (NO_ERROR): the client opens no more
// streams; the ones opened are served, then the connection closes.
func (h *h2Conn) goAwayLocked() {
	if h.goneAway || h.failed {
		return
	}
	h.goneAway = true
	h.goAwayID = h.lastStream
	h.c.srv.stats.h2.goAways.Add(1)
	_ = h.fr.WriteGoAway(h.lastStream, http2.ErrCodeNo, nil)
	h.takeFramed()
	h.closeIfDoneLocked()
}

// connErrorLocked ends the connection for a connection error (RFC 9113
// §5.4.1) or an exceeded bound, counted in counter: GOAWAY with code,
// then a lingering close.
func (h *h2Conn) connErrorLocked(code http2.ErrCode, counter interface{ Add(uint64) uint64 }, detail string) {
	if h.failed {
		return
	}
	c := h.c
	counter.Add(1)
	c.srv.stats.h2.goAways.Add(1)
	c.srv.log.Debug("http: h2 connection error", "conn", c.String(), "code", code, "detail", detail)
	_ = h.fr.WriteGoAway(h.lastStream, code, []byte(detail))
	h.takeFramed()
	h.goneAway, h.failed = true, true
	h.failStreamsLocked(fmt.Errorf("http: h2 connection error %s: %s: %w", code, detail, &sink.ClosedError{Sink: c.String()}))
	h.flushLocked()
	c.linger = true
	_ = c.sock.Linger()
}

// failStreamsLocked drops every stream's response.
func (h *h2Conn) failStreamsLocked(err error) {
	h.failed = true
	for _, st := range h.streams {
		st.replied = true // a later answer is dropped
		h.dropStreamLocked(st, err)
	}
	h.sendq.Clear()
	h.fileWaits = nil
}

// ---- streamed bodies (Stream's methods on an HTTP/2 connection) ----

// streamWrite is Stream.Write on an HTTP/2 connection.
func (h *h2Conn) streamWrite(s *Stream, b []byte, done func(error)) error {
	c := h.c
	c.mu.Lock()
	var err error
	switch {
	case s.err != nil:
		err = s.err
	case h.closed || h.failed:
		err = c.closedErr()
	case int64(len(b)) > s.left:
		err = fmt.Errorf("%w: stream piece of %d bytes with %d left of %d", ErrBadReply, len(b), s.left, s.length)
	}
	if err != nil {
		c.calls = append(c.calls, doneCall{done, err})
		c.unlock()
		return err
	}
	s.left -= int64(len(b))
	st := h.bodies[s]
	switch {
	case len(b) == 0:
		c.calls = append(c.calls, doneCall{done, nil})
	case st != nil:
		st.body.(*pieceBody).push(b, done)
		st.at = sink.Nanotime()
		h.scheduleLocked(st)
		if !h.batching {
			h.flushLocked()
		}
	default:
		s.pieces = append(s.pieces, outWrite{data: b, done: done})
	}
	c.unlock()
	return nil
}

// streamAbort is Stream.Abort on an HTTP/2 connection: a stream whose
// header is out is reset (INTERNAL_ERROR); one not sent yet is answered
// 500 when its reply comes.
func (h *h2Conn) streamAbort(s *Stream, err error) {
	c := h.c
	c.mu.Lock()
	st := h.bodies[s]
	if s.err != nil || s.emitted && st == nil {
		c.mu.Unlock()
		return
	}
	s.err = err
	s.failPiecesLocked(err)
	if st != nil {
		h.resetLocked(st.id, http2.ErrCodeInternal)
		h.flushLocked()
	}
	c.unlock()
}
