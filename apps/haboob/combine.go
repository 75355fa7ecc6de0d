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
	gz         *gzipper
	revalidate time.Duration
	send       sink.Sink
	plainSend  bool
}

// answerInline is the Combine path, the HTTP servers' Inline hook when
// HttpRecv's `combine` arg is on: on the goroutine that parsed req (the
// socket's event loop), it answers a GET or HEAD whose page is cached and
// fresh, or whose file is in the open-file cache and valid (sent with
// sendfile), straight on the connection, as PageCache and HttpSend would
// have, and reports whether it did. It is the thesis's Combine pattern (chapter
// 3 §6.4, Fig. 13) applied to HttpRecv, PageCache and HttpSend for cache
// hits: two queue hand-offs fewer, and the goroutine wake-ups they cost.
//
// A page or open file due for revalidation is answered too, and its check
// handed to CacheMiss (lossy, as PageCache does it: one request per period
// claims the check, every request is served from the cache meanwhile).
//
// It declines, and the request takes the stages' path, for anything but a
// GET or HEAD of a static path; for a page not cached; for a client that accepts
// gzip, a page whose gzip variant is not cached (compressing it or reading
// its .gz file is the stages' work, never the event loop's); when
// PageCache sends its hits
// through a stage other than HttpSend; and while HttpRecv, PageCache or
// the stage PageCache sends hits through has an admission predicate
// (admission control sees every request it would have seen).
func (h *httpRecv) answerInline(req *http.Request) bool {
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
	if v == nil || v.stage != h.args.Static || !v.plainSend || h.self.Predicate() != nil || h.static.Predicate() != nil ||
		v.send != nil && v.send.Predicate() != nil {
		return false
	}
	now := sink.Nanotime()
	gz := v.gz.accepts(req)
	var p *Page
	if gz {
		p, ok = v.cache.get(gzipKey(path), false)
	}
	if p == nil {
		if p, ok = v.cache.get(path, false); !ok {
			e, ok := lookupOpenFile(v.cache, v.revalidate, req, gz, now)
			if !ok {
				return false
			}
			h.inline.Add(1)
			_ = conn.Answer(fileAnswer(req, e)) // on error the reference is released
			return true
		}
		if gz && p.rep.gz != gzipNone {
			// Its gzip variant is not cached: compressing or reading it
			// is the stages' work, never the event loop's.
			p.Release()
			return false
		}
	}
	revalidateDue(v.cache, v.revalidate, p, now)
	h.inline.Add(1)
	// Connection.Answer is Send (what HttpSend calls) for a value: the same formatting, the
	// same per-connection ordering of pipelined responses. An error means
	// the connection closed; the reply's Done has released the page.
	_ = conn.Answer(pageReply(req, p))
	return true
}
