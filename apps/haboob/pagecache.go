package haboob

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// cacheArgs are PageCache's args.
type cacheArgs struct {
	// MaxBytes bounds the bytes of cached pages (default 64 MiB).
	MaxBytes aio.ByteSize `yaml:"maxBytes"`
	// Revalidate is how old a cached page may get before CacheMiss checks
	// its file again (in the background; the page is served meanwhile).
	// Default 2s; negative: never.
	Revalidate time.Duration `yaml:"revalidate"`
	Miss       string        `yaml:"miss"`
	// Send names the stage that writes responses; "" writes hits straight
	// to their connections from this stage (the thesis's Combine pattern:
	// formatting inlined into the send).
	Send       string        `yaml:"send"`
	RetryAfter time.Duration `yaml:"retryAfter"`
	// Gzip configures compression (gzip_static and on the fly); see
	// gzipArgs. On by default.
	Gzip gzipArgs `yaml:"gzip"`
	// OpenFiles configures the open-file cache: the files CacheMiss
	// leaves to the OS page cache, sent with sendfile, are kept open
	// here, and their requests answered from this stage (see openFiles).
	OpenFiles openFileArgs `yaml:"openFiles"`
}

// pageCache is the PageCache stage (thesis §6.1.1): it serves static
// requests from the in-memory cache and passes misses to CacheMiss. Within
// each batch it serves hits before misses, and the shortest pages first
// (shortest connection first scheduling, applied per batch so nothing
// starves).
type pageCache struct {
	srv   *Server
	log   *slog.Logger
	args  cacheArgs
	cache *PageCache
	gz    *gzipper
	miss  sink.Sink
	send  sendFunc
}

type hit struct {
	req  *http.Request
	page *Page
}

func (h *pageCache) Init(c *stage.Context) error {
	h.log = h.srv.logger(c)
	h.args = cacheArgs{MaxBytes: 64 << 20, Revalidate: 2 * time.Second, Miss: StageCacheMiss, Send: StageHttpSend, RetryAfter: time.Second}
	if err := c.DecodeArgs(&h.args); err != nil {
		return err
	}
	if h.args.MaxBytes <= 0 {
		return fmt.Errorf("haboob: PageCache: maxBytes must be positive, got %v", h.args.MaxBytes)
	}
	gzArgs, err := h.args.Gzip.withDefaults()
	if err != nil {
		return c.ArgError(err, "gzip")
	}
	if h.miss, err = c.Sink(h.args.Miss); err != nil {
		return fmt.Errorf("haboob: PageCache miss stage: %w", err)
	}
	h.send = sendDirect
	var sendStage sink.Sink
	if h.args.Send != "" {
		if sendStage, err = c.Sink(h.args.Send); err != nil {
			return fmt.Errorf("haboob: PageCache send stage: %w", err)
		}
		h.send = viaStage(sendStage)
	}
	// HttpRecv's Combine path writes hits as HttpSend does: only hits
	// that would go to HttpSend (or straight out) may take it.
	plainSend := h.args.Send == ""
	if st, ok := c.Manager().Stage(h.args.Send); ok {
		plainSend = st.Config().Handler == HandlerHttpSend
	}
	h.srv.mu.Lock()
	if h.srv.cache != nil {
		h.srv.mu.Unlock()
		return fmt.Errorf("haboob: a second PageCache stage in one Server")
	}
	h.cache = NewPageCache(int64(h.args.MaxBytes))
	h.cache.files = newOpenFiles(h.args.OpenFiles)
	h.cache.recheck = h.cache.files.args.Valid
	if h.args.Revalidate > 0 {
		h.cache.recheck = min(h.cache.recheck, h.args.Revalidate)
	}
	h.gz = newGzipper(gzArgs, h.cache)
	h.srv.cache = h.cache
	h.srv.gz = h.gz
	h.srv.mu.Unlock()
	h.cache.due.init(h.miss, h.cache.recheck)
	h.srv.cacheView.Store(&cacheView{stage: c.Stage().Name(), cache: h.cache, gz: h.gz, revalidate: h.args.Revalidate, send: sendStage, plainSend: plainSend})
	st := func(f func(CacheStats) float64) func() float64 { return func() float64 { return f(h.cache.Stats()) } }
	c.Profile("cache.bytes", st(func(s CacheStats) float64 { return float64(s.Bytes) }))
	c.Profile("cache.pages", st(func(s CacheStats) float64 { return float64(s.Pages) }))
	c.Profile("cache.hits", st(func(s CacheStats) float64 { return float64(s.Hits) }))
	c.Profile("cache.misses", st(func(s CacheStats) float64 { return float64(s.Misses) }))
	c.Profile("cache.evictions", st(func(s CacheStats) float64 { return float64(s.Evictions) }))
	c.Profile("gzip.compressions", func() float64 { return float64(h.gz.compressions.Load()) })
	c.Profile("files.open", st(func(s CacheStats) float64 { return float64(s.OpenFiles) }))
	c.Profile("files.hits", st(func(s CacheStats) float64 { return float64(s.OpenFileHits) }))
	c.Profile("files.misses", st(func(s CacheStats) float64 { return float64(s.OpenFileMisses) }))
	return nil
}

// Destroy closes the files the open-file cache keeps open (each once the
// responses sending it are out).
func (h *pageCache) Destroy() error {
	if h.cache != nil {
		h.cache.due.stop()
		h.cache.files.purge()
	}
	return nil
}

func (h *pageCache) HandleEvents(batch []sink.Event) error {
	hits := make([]hit, 0, len(batch))
	var misses []*http.Request
	var compress []hit // gzip clients of pages whose gzip copy is not cached
	var files []*http.Reply
	now := sink.Nanotime()
	for _, e := range batch {
		req, ok := e.(*http.Request)
		if !ok {
			h.log.Warn("haboob: PageCache: unexpected event", "type", fmt.Sprintf("%T", e))
			continue
		}
		gz := h.gz.accepts(req)
		if gz {
			if q, ok := h.cache.get(gzipKey(req.Path), false); ok {
				hits = append(hits, hit{req, q})
				h.maybeRevalidate(q, now)
				continue
			}
		}
		p, ok := h.cache.Get(req.Path)
		if !ok {
			if e, ok := h.openFile(req, gz, now); ok {
				files = append(files, fileReply(req, e))
				continue
			}
			misses = append(misses, req)
			continue
		}
		h.maybeRevalidate(p, now)
		switch {
		case !gz || p.rep.gz == gzipNone:
			hits = append(hits, hit{req, p})
		case p.rep.gz == gzipDynamic:
			compress = append(compress, hit{req, p})
		default: // the .gz sibling is not cached: CacheMiss reads it
			p.Release()
			misses = append(misses, req)
		}
	}
	slices.SortStableFunc(hits, func(a, b hit) int { return len(a.page.Body) - len(b.page.Body) })
	reply := func(r *http.Reply) { send(h.send, r, h.args.RetryAfter) }
	for _, x := range hits {
		reply(staticReply(x.req, x.page))
	}
	for _, x := range compress {
		h.gz.serve(x.req, x.page, reply)
	}
	for _, r := range files {
		sendFileReply(h.send, r, h.args.RetryAfter)
	}
	for _, req := range misses {
		if err := h.miss.Enqueue(req); err != nil {
			unavailable(req, h.args.RetryAfter)
		}
	}
	return nil
}

// openFile finds req's file in the open-file cache, for a connection
// that sends files (not HTTP/1.1 over TLS).
func (h *pageCache) openFile(req *http.Request, gz bool, now int64) (*openFile, bool) {
	return lookupOpenFile(h.cache, h.args.Revalidate, req, gz, now)
}

// lookupOpenFile finds req's file in files, for a connection that sends
// files (not HTTP/1.1 over TLS). With revalidate > 0 an entry whose
// validity ran out is returned too, and one request per period hands its
// check to CacheMiss (through cache's dueChecks) while the entry goes on
// answering; with
// revalidate <= 0 such an entry is not returned (the request goes to
// CacheMiss).
func lookupOpenFile(cache *PageCache, revalidate time.Duration, req *http.Request, gz bool, now int64) (*openFile, bool) {
	if !sendsFiles(req) {
		return nil, false
	}
	files := cache.files
	e, ok := files.lookup(req.Path, gz, now, revalidate > 0)
	if ok && revalidate > 0 && files.due(e, now) {
		// Served while CacheMiss checks its path, as a page is.
		cache.due.addFile(e)
	}
	return e, ok
}

// sendsFiles reports whether req's connection sends file bodies from a
// descriptor at a bounded memory cost: with sendfile (HTTP/1.1 on a plain
// socket), or by pread a chunk at a time on an HTTP/2 stream (h2c and h2
// over TLS). HTTP/1.1 over TLS takes the streamed path instead.
func sendsFiles(req *http.Request) bool {
	c, ok := req.Conn.(*http.Connection)
	return ok && c.SendsFiles()
}

// maybeRevalidate has CacheMiss check a page's file once it is older than
// Revalidate.
func (h *pageCache) maybeRevalidate(p *Page, now int64) {
	revalidateDue(h.cache, h.args.Revalidate, p, now)
}

// revalidateDue hands p's check to CacheMiss (through cache's
// dueChecks) once p is older than period (> 0): one request per period
// wins the check, every request is served from the cache meanwhile. A
// check the stage refuses waits for the next hand-off (see dueChecks).
func revalidateDue(cache *PageCache, period time.Duration, p *Page, now int64) {
	if period <= 0 {
		return
	}
	last := p.checked.Load()
	if now-last > int64(period) && p.checked.CompareAndSwap(last, now) {
		cache.due.addPage(p)
	}
}

// staticReply answers a GET or HEAD with a cached page, honouring
// conditional requests (304) and a single byte range (206 or 416; a page
// compressed on the fly ignores Range and is sent whole, as nginx does).
// The page, retained for this reply, is released once its bytes are no
// longer needed.
func staticReply(req *http.Request, p *Page) *http.Reply {
	r := pageReply(req, p)
	return &r
}

// pageReply is staticReply's answer as a value: a 200 of the whole page
// (the common case) points to the page's own response and body slice and
// allocates nothing; a 304, 206 or 416 allocates its response.
func pageReply(req *http.Request, p *Page) http.Reply {
	reply := http.Reply{Req: req, Resp: &p.ok, Body: p.okBody[:], Done: p.ReleaseFunc()}
	body, r := p.Body, &p.rep
	size := int64(len(body))
	if NotModified(req, r.v) {
		reply.Resp, reply.Body = &http.Response{Status: http.StatusNotModified, Header: r.notModifiedHeader()}, nil
		return reply
	}
	if req.Method == "GET" && !r.noRanges {
		br, partial, err := ParseRange(req, size, r.v)
		switch {
		case err != nil:
			reply.Resp, reply.Body = http.StatusResponse(http.StatusRangeNotSatisfiable), nil
			reply.Resp.Header.Add("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
			return reply
		case partial:
			reply.Resp = http.PartialContent(r.ctype, br.First, br.Last, size, nil)
			reply.Resp.Header = r.encodingFields(reply.Resp.Header)
			reply.Resp.Header = append(validatorFields(reply.Resp.Header, r.v), http.Field{Name: "Accept-Ranges", Value: "bytes"})
			reply.Body = [][]byte{body[br.First : br.Last+1]}
			return reply
		}
	}
	return reply
}

func validatorFields(h http.Header, v Validators) http.Header {
	if !v.ModTime.IsZero() {
		h = append(h, http.Field{Name: "Last-Modified", Value: v.ModTime.UTC().Format(http.TimeFormat)})
	}
	if v.ETag != "" {
		h = append(h, http.Field{Name: "ETag", Value: v.ETag})
	}
	return h
}
