package http

import (
	"errors"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sandstorm-go/sandstorm/sink"
)

// This file is an HTTP/2 connection's input: frames read on the socket's
// event loop, streams opened, requests built and handed to the
// application (the same sink and path as HTTP/1.1 requests).

// onPacket takes bytes received on the connection.
func (h *h2Conn) onPacket(data []byte) error {
	c := h.c
	c.mu.Lock()
	if h.failed || h.closed {
		c.linger = true
		c.mu.Unlock()
		return nil
	}
	now := sink.Nanotime()
	h.lastAct = now
	h.in = append(h.in, data...)
	h.readFramesLocked()
	switch partial := len(h.in) > 0 || h.block.open || !h.preface; {
	case !partial:
		h.partialAt = 0
	case h.partialAt == 0:
		h.partialAt = now
	}
	if h.recvUnacked > 0 && !h.failed {
		_ = h.fr.WriteWindowUpdate(0, uint32(h.recvUnacked))
		h.takeFramed()
		h.recvWindow += h.recvUnacked
		h.recvUnacked = 0
	}
	reqs := h.ready
	h.ready = nil
	if len(reqs) == 0 {
		h.flushLocked()
		c.unlock()
		return nil
	}
	// The answers given while the requests are delivered (a cache hit is
	// answered inline) go out together, in one write, after them.
	h.batching = true
	c.unlock()
	c.deliver(reqs)
	c.mu.Lock()
	h.batching = false
	h.flushLocked()
	c.unlock()
	return nil
}

// readFramesLocked handles every whole frame held in h.in.
func (h *h2Conn) readFramesLocked() {
	in := h.in
	defer func() {
		if len(in) == 0 && cap(h.in) > 64<<10 {
			h.in = nil // a large packet's buffer is not kept by an idle connection
			return
		}
		h.in = append(h.in[:0], in...)
	}()
	for !h.failed {
		if !h.preface {
			n := min(len(in), len(h2Preface))
			if string(in[:n]) != h2Preface[:n] {
				h.connErrorLocked(http2.ErrCodeProtocol, &h.c.srv.stats.h2.protocolErrors, "bad client preface")
				return
			}
			if n < len(h2Preface) {
				return
			}
			in = in[n:]
			h.preface = true
		}
		if len(in) < 9 {
			return
		}
		length := int(in[0])<<16 | int(in[1])<<8 | int(in[2])
		if length > h2FrameSize {
			h.connErrorLocked(http2.ErrCodeFrameSize, &h.c.srv.stats.h2.protocolErrors, "frame over the maximum size")
			return
		}
		if len(in) < 9+length {
			return
		}
		h.frIn.b = in[:9+length]
		f, err := h.fr.ReadFrame()
		in = in[9+length:]
		if err != nil {
			h.frameErrorLocked(err)
			continue
		}
		h.handleFrameLocked(f)
	}
}

// frameErrorLocked answers a frame the Framer rejected.
func (h *h2Conn) frameErrorLocked(err error) {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		h.resetLocked(se.StreamID, se.Code)
	case errors.As(err, &ce):
		h.connErrorLocked(http2.ErrCode(ce), &h.c.srv.stats.h2.protocolErrors, err.Error())
	default:
		h.connErrorLocked(http2.ErrCodeProtocol, &h.c.srv.stats.h2.protocolErrors, err.Error())
	}
}

func (h *h2Conn) handleFrameLocked(f http2.Frame) {
	if !h.gotSettings {
		if _, ok := f.(*http2.SettingsFrame); !ok {
			h.connErrorLocked(http2.ErrCodeProtocol, &h.c.srv.stats.h2.protocolErrors, "first frame is not SETTINGS")
			return
		}
		h.gotSettings = true
	}
	stats := &h.c.srv.stats.h2
	switch f := f.(type) {
	case *http2.HeadersFrame:
		h.onHeadersLocked(f)
	case *http2.ContinuationFrame:
		h.block.conts++
		if h.block.conts > h.cfg.MaxContinuations {
			h.connErrorLocked(http2.ErrCodeEnhanceYourCalm, &stats.continuations, "too many CONTINUATION frames")
			return
		}
		h.fragmentLocked(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.DataFrame:
		h.onDataLocked(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return
		}
		if !h.controlLocked() {
			return
		}
		h.onSettingsLocked(f)
	case *http2.PingFrame:
		if f.IsAck() || !h.controlLocked() {
			return
		}
		_ = h.fr.WritePing(true, f.Data)
		h.takeFramed()
	case *http2.PriorityFrame:
		h.controlLocked()
	case *http2.WindowUpdateFrame:
		h.onWindowUpdateLocked(f)
	case *http2.RSTStreamFrame:
		stats.resetsIn.Add(1)
		if !h.resetBudgetLocked() {
			return
		}
		h.onResetLocked(f.StreamID)
	case *http2.GoAwayFrame:
		h.goneAwayPeerLocked()
	case *http2.PushPromiseFrame:
		h.connErrorLocked(http2.ErrCodeProtocol, &stats.protocolErrors, "PUSH_PROMISE from a client")
	}
	// Unknown frame types are ignored (RFC 9113 §5.5).
}

// controlLocked counts a control frame (or an empty one) against
// MaxControlPerSecond and reports whether the connection stays up.
func (h *h2Conn) controlLocked() bool {
	if h.controls.add(sink.Nanotime(), h.cfg.MaxControlPerSecond) {
		return true
	}
	h.connErrorLocked(http2.ErrCodeEnhanceYourCalm, &h.c.srv.stats.h2.controlFlood, "control frame flood")
	return false
}

// resetBudgetLocked counts a stream reset (by the client, or refused or
// reset by us) against MaxResetsPerSecond.
func (h *h2Conn) resetBudgetLocked() bool {
	if h.resets.add(sink.Nanotime(), h.cfg.MaxResetsPerSecond) {
		return true
	}
	h.connErrorLocked(http2.ErrCodeEnhanceYourCalm, &h.c.srv.stats.h2.tooManyResets, "too many stream resets")
	return false
}

func (h *h2Conn) onHeadersLocked(f *http2.HeadersFrame) {
	id := f.StreamID
	stats := &h.c.srv.stats.h2
	if len(f.HeaderBlockFragment()) == 0 && !h.controlLocked() {
		return
	}
	b := &h.block
	*b = headerBlock{open: true, id: id, endStream: f.StreamEnded(), fields: b.fields[:0]}
	switch st := h.streams[id]; {
	case id%2 == 0:
		h.connErrorLocked(http2.ErrCodeProtocol, &stats.protocolErrors, "HEADERS on an even stream")
		return
	case st != nil:
		if st.remoteClosed || !f.StreamEnded() {
			h.connErrorLocked(http2.ErrCodeProtocol, &stats.protocolErrors, "HEADERS on a half-closed stream")
			return
		}
		b.trailers = true // trailers: decoded (for HPACK) and ignored
	case id <= h.lastStream:
		h.connErrorLocked(http2.ErrCodeStreamClosed, &stats.protocolErrors, "HEADERS on a closed stream")
		return
	default:
		h.lastStream = id
	}
	h.fragmentLocked(f.HeaderBlockFragment(), f.HeadersEnded())
}

// fragmentLocked decodes one fragment of the header block.
func (h *h2Conn) fragmentLocked(p []byte, end bool) {
	b := &h.block
	stats := &h.c.srv.stats.h2
	b.bytes += len(p)
	if b.bytes > h.cfg.MaxHeaderListSize {
		h.connErrorLocked(http2.ErrCodeEnhanceYourCalm, &stats.headerListLarge, "header block too large")
		return
	}
	if _, err := h.dec.Write(p); err != nil {
		h.connErrorLocked(http2.ErrCodeCompression, &stats.hpackErrors, err.Error())
		return
	}
	if b.over {
		h.connErrorLocked(http2.ErrCodeEnhanceYourCalm, &stats.headerListLarge, "header list too large")
		return
	}
	if !end {
		return
	}
	if err := h.dec.Close(); err != nil {
		h.connErrorLocked(http2.ErrCodeCompression, &stats.hpackErrors, err.Error())
		return
	}
	h.endBlockLocked()
}

// emitField is the HPACK decoder's output.
func (h *h2Conn) emitField(f hpack.HeaderField) {
	b := &h.block
	b.listSize += int(f.Size())
	if b.listSize > h.cfg.MaxHeaderListSize {
		b.over = true
		return
	}
	if !b.trailers {
		b.fields = append(b.fields, f)
	}
}

// endBlockLocked opens the stream of a complete header block.
func (h *h2Conn) endBlockLocked() {
	b := &h.block
	b.open = false
	id := b.id
	fields := b.fields
	defer func() {
		clear(fields)
		b.fields = fields[:0]
	}()
	if b.trailers {
		h.remoteEndLocked(h.streams[id])
		return
	}
	stats := &h.c.srv.stats.h2
	if h.goneAway || len(h.streams) >= h.cfg.MaxConcurrentStreams {
		stats.refused.Add(1)
		h.resetLocked(id, http2.ErrCodeRefusedStream)
		return
	}
	r, wantLen, err := h.newRequest(id, fields)
	if err != nil {
		h.c.srv.stats.parseErrors.Add(1)
		h.c.srv.log.Debug("http: bad h2 request", "conn", h.c.String(), "stream", id, "err", err)
		h.resetLocked(id, http2.ErrCodeProtocol)
		return
	}
	stats.streams.Add(1)
	st := &h2Stream{id: id, req: r, wantLen: wantLen, at: sink.Nanotime(),
		window: h.peerWindow, recvWindow: int64(h.cfg.InitialWindowSize)}
	h.streams[id] = st
	if f := h.c.srv.cfg.SkipBody; !b.endStream && f != nil && f(r) {
		st.discard = true
		h.deliverLocked(st)
	}
	if b.endStream {
		h.remoteEndLocked(st)
	}
}

// deliverLocked queues the stream's request for the application.
func (h *h2Conn) deliverLocked(st *h2Stream) {
	st.delivered = true
	st.at = sink.Nanotime()
	st.req.Received = time.Now()
	h.ready = append(h.ready, st.req)
}

// remoteEndLocked handles the client's END_STREAM.
func (h *h2Conn) remoteEndLocked(st *h2Stream) {
	if st == nil || st.remoteClosed {
		return
	}
	st.remoteClosed = true
	if !st.delivered {
		if st.wantLen >= 0 && st.wantLen != int64(len(st.req.Body)) {
			h.resetLocked(st.id, http2.ErrCodeProtocol)
			return
		}
		h.deliverLocked(st)
	}
	if st.sentEnd {
		h.closeStreamLocked(st)
	}
}

// connectionFields are the fields HTTP/2 forbids (RFC 9113 §8.2.2).
var connectionFields = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "upgrade": true,
}

// countRegularFields is how many of fields are not pseudo-headers.
func countRegularFields(fields []hpack.HeaderField) int {
	n := 0
	for _, f := range fields {
		if !f.IsPseudo() {
			n++
		}
	}
	return n
}

// newRequest builds stream id's request from its header list (RFC 9113
// §8.3.1), and returns its content-length (-1: none).
func (h *h2Conn) newRequest(id uint32, fields []hpack.HeaderField) (*Request, int64, error) {
	r := &Request{Proto: "HTTP/2.0", Major: 2, Conn: h.c, Seq: uint64(id)}
	r.Header = r.fields[:0]
	if n := countRegularFields(fields); n > len(r.fields) {
		r.Header = make(Header, 0, n) // one allocation, not a growth chain
	}
	var scheme string
	wantLen := int64(-1)
	regular := false
	bad := func(format string, args ...any) (*Request, int64, error) {
		return nil, 0, newError(ErrMalformed, format, args...)
	}
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			if regular {
				return bad("pseudo-header %s after regular fields", f.Name)
			}
			var dst *string
			switch f.Name {
			case ":method":
				dst = &r.Method
			case ":path":
				dst = &r.Target
			case ":scheme":
				dst = &scheme
			case ":authority":
				dst = &r.Host
			default:
				return bad("pseudo-header %s", f.Name)
			}
			if *dst != "" {
				return bad("duplicate %s", f.Name)
			}
			*dst = f.Value
			continue
		}
		regular = true
		if !validFieldName(f.Name) || connectionFields[f.Name] || f.Name == "te" && f.Value != "trailers" {
			return bad("field %q", f.Name)
		}
		if f.Name == "content-length" {
			n, ok := parseDecimal(f.Value)
			if !ok || wantLen >= 0 && n != wantLen {
				return bad("content-length %q", f.Value)
			}
			wantLen = n
		}
		if f.Name == "cookie" {
			// Cookie crumbs are one field again (RFC 9113 §8.2.3).
			if i := slices.IndexFunc(r.Header, func(h Field) bool { return h.Name == "cookie" }); i >= 0 {
				r.Header[i].Value += "; " + f.Value
				continue
			}
		}
		r.Header = append(r.Header, Field{Name: f.Name, Value: f.Value})
	}
	switch {
	case r.Method == "CONNECT":
		return bad("CONNECT is not supported")
	case !isToken(r.Method) || scheme == "" || r.Target == "":
		return bad("missing or bad pseudo-headers")
	}
	if r.Host == "" {
		r.Host = r.Header.Get("Host")
	}
	if err := r.parseTarget(); err != nil {
		return nil, 0, err
	}
	if err := h.c.parser.parseClass(r); err != nil {
		return nil, 0, err
	}
	if wantLen > h.c.srv.cfg.Limits.MaxBody && h.c.srv.cfg.Limits.MaxBody > 0 {
		return bad("content-length %d over the limit", wantLen)
	}
	return r, wantLen, nil
}

// validFieldName: a lower-case token (RFC 9113 §8.2.1).
func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isTokenByte(c) || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

func (h *h2Conn) onDataLocked(f *http2.DataFrame) {
	stats := &h.c.srv.stats.h2
	n := int64(f.Length)
	h.recvWindow -= n
	if h.recvWindow < 0 {
		h.connErrorLocked(http2.ErrCodeFlowControl, &stats.protocolErrors, "connection receive window exceeded")
		return
	}
	h.recvUnacked += n
	data := f.Data()
	if len(data) == 0 && !f.StreamEnded() && !h.controlLocked() {
		return
	}
	st := h.streams[f.StreamID]
	if st == nil || st.remoteClosed {
		if f.StreamID > h.lastStream {
			h.connErrorLocked(http2.ErrCodeProtocol, &stats.protocolErrors, "DATA on an idle stream")
		}
		return // a stream closed or reset: its frames in flight are dropped
	}
	st.recvWindow -= n
	if st.recvWindow < 0 {
		h.resetLocked(st.id, http2.ErrCodeFlowControl)
		return
	}
	if !st.delivered && !st.discard && len(data) > 0 {
		r := st.req
		lim := h.c.srv.cfg.Limits.MaxBody
		switch {
		case lim > 0 && int64(len(r.Body)+len(data)) > lim:
			h.answerSelfLocked(st, StatusResponse(StatusContentTooLarge))
		case !h.c.reserveBody(r, int64(len(data))):
			h.c.srv.stats.rejected.Add(1)
			h.answerSelfLocked(st, ServiceUnavailable(h.c.srv.cfg.RetryAfter))
		default:
			r.Body = append(r.Body, data...)
		}
	}
	if f.StreamEnded() {
		h.remoteEndLocked(st)
		return
	}
	if n > 0 {
		st.recvWindow += n
		_ = h.fr.WriteWindowUpdate(st.id, uint32(n))
		h.takeFramed()
	}
}

// answerSelfLocked answers a stream the connection refuses itself (a
// body too large, or over the server's BodyBudget); the rest of its body
// is discarded.
func (h *h2Conn) answerSelfLocked(st *h2Stream, resp *Response) {
	st.delivered, st.discard = true, true
	st.at = sink.Nanotime()
	h.emitLocked(st, Reply{Req: st.req, Resp: resp})
}

func (h *h2Conn) onSettingsLocked(f *http2.SettingsFrame) {
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			h.enc.SetMaxDynamicTableSize(min(s.Val, h.cfg.HeaderTableSize))
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - h.peerWindow
			h.peerWindow = int64(s.Val)
			for _, st := range h.streams {
				st.window += delta
				if st.window > h2MaxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
				h.scheduleLocked(st)
			}
		}
		return nil
	})
	if err != nil {
		h.frameErrorLocked(err)
		return
	}
	_ = h.fr.WriteSettingsAck()
	h.takeFramed()
}

func (h *h2Conn) onWindowUpdateLocked(f *http2.WindowUpdateFrame) {
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		h.sendWindow += inc
		if h.sendWindow > h2MaxWindow {
			h.connErrorLocked(http2.ErrCodeFlowControl, &h.c.srv.stats.h2.protocolErrors, "connection window over 2^31-1")
		}
		return
	}
	st := h.streams[f.StreamID]
	if st == nil {
		if f.StreamID > h.lastStream {
			h.connErrorLocked(http2.ErrCodeProtocol, &h.c.srv.stats.h2.protocolErrors, "WINDOW_UPDATE on an idle stream")
		}
		return
	}
	st.window += inc
	if st.window > h2MaxWindow {
		h.resetLocked(st.id, http2.ErrCodeFlowControl)
		return
	}
	h.scheduleLocked(st)
}

// onResetLocked handles the client's RST_STREAM.
func (h *h2Conn) onResetLocked(id uint32) {
	if id > h.lastStream {
		h.connErrorLocked(http2.ErrCodeProtocol, &h.c.srv.stats.h2.protocolErrors, "RST_STREAM on an idle stream")
		return
	}
	if st := h.streams[id]; st != nil {
		st.remoteClosed, st.sentEnd = true, true
		h.dropStreamLocked(st, errStreamReset)
	}
}

var errStreamReset = errors.New("http: h2 stream reset")

// goneAwayPeerLocked handles the client's GOAWAY: it opens no more
// streams; the ones open are finished, then the connection closes.
func (h *h2Conn) goneAwayPeerLocked() {
	if !h.goneAway {
		h.goneAway = true
		h.goAwayID = h.lastStream
	}
	h.closeIfDoneLocked()
}
