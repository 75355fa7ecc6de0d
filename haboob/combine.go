package haboob

import (
	"time"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// cacheView is what HttpRecv's Combine path needs of the PageCache stage:
// the stage's name, its cache, how long a page is served before its file
// is checked again, the stage it sends hits through (nil: straight to
// the connection), and whether that is an HttpSend stage (or none).
type cacheView struct {
	stage      string
	cache      *PageCache
	revalidate time.Duration
	send       sink.Sink
	plainSend  bool
}

// combiner is the sink the HTTP server hands parsed requests to when
// HttpRecv's `combine` arg is on: on the goroutine that parsed the request
// (the socket's event loop), it answers a GET or HEAD whose page is cached
// and fresh straight on the connection, as PageCache and HttpSend would
// have (the thesis's Combine pattern, §3.4.3: HttpRecv, PageCache and
// HttpSend combined for cache hits, which saves two queue hand-offs and the
// goroutine wake-ups they cost). Every other request goes to the HttpRecv
// stage as before.
type combiner struct {
	sink.Sink // the HttpRecv stage's own
	h         *httpRecv
}

func (c combiner) Enqueue(e sink.Event) error {
	if req, ok := e.(*http.Request); ok && c.h.answerInline(req, c.Sink) {
		return nil
	}
	return c.Sink.Enqueue(e)
}

// answerInline answers req from the page cache if it can, and reports
// whether it did. It declines (the request takes the stages' path) for
// anything but a GET or HEAD of a static path, when PageCache sends its
// hits through a stage other than HttpSend, for a page not cached or
// due for revalidation (PageCache starts the check), and while HttpRecv,
// PageCache or the stage PageCache sends hits through (HttpSend) has an
// admission predicate (admission control sees every request it would
// have seen).
func (h *httpRecv) answerInline(req *http.Request, self sink.Sink) bool {
	if req.Method != "GET" && req.Method != "HEAD" {
		return false
	}
	path := req.Path
	if path == "" || path[0] != '/' || h.args.Stats != "" && path == h.args.Stats {
		return false
	}
	for _, r := range h.routes {
		if routeMatches(r.prefix, path) {
			return false
		}
	}
	conn, ok := req.Conn.(*http.Connection)
	if !ok {
		return false
	}
	v := h.srv.cacheView.Load()
	if v == nil || v.stage != h.args.Static || !v.plainSend || self.Predicate() != nil || h.static.Predicate() != nil ||
		v.send != nil && v.send.Predicate() != nil {
		return false
	}
	p, ok := v.cache.getFresh(path, sink.Nanotime(), v.revalidate)
	if !ok {
		return false
	}
	h.inline.Add(1)
	// Connection.Send is what HttpSend calls: the same formatting, the
	// same per-connection ordering of pipelined responses. An error means
	// the connection closed; the reply's Done has released the page.
	_ = conn.Send(staticReply(req, p.Body, p.ContentType, p.Validators, p.Header, p.ReleaseFunc()))
	return true
}
