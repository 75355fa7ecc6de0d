package haboob

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// missArgs are CacheMiss's args.
type missArgs struct {
	// Root is the document root (Options.Root overrides it).
	Root string `yaml:"root"`
	// Index lists the files served for a directory (default index.html,
	// index.htm).
	Index []string `yaml:"index"`
	// MaxObject is the largest file cached (default 1 MiB). Larger ones
	// are not cached: each request reads the bytes it is answered with, in
	// Chunk-sized pieces, while the previous ones are written (HEAD and
	// 304 answers read nothing, a Range reads only the range), so that
	// the memory a response holds is bounded whatever the file's size.
	MaxObject aio.ByteSize `yaml:"maxObject"`
	// Chunk is the size of the pieces of an uncached file's body (default
	// 256 KiB); at most two pieces per response are held in memory. It
	// may be at most half the HTTP socket's writeThreshold bytes (an Init
	// error; clamped with a warning if HttpRecv is declared after
	// CacheMiss).
	Chunk aio.ByteSize `yaml:"chunk"`
	// SendfileMin is the size from which a file is sent with sendfile
	// from the OS page cache instead of being read into the page cache
	// (default 16 KiB, see docs/haboob-bench.md; 0: every file), on a
	// connection that can (not TLS). Files above MaxObject are always
	// sent so. Such files stay open in the open-file cache (PageCache's
	// openFiles), which answers their requests without a stage hop.
	SendfileMin aio.ByteSize  `yaml:"sendfileMin"`
	Send        string        `yaml:"send"`
	RetryAfter  time.Duration `yaml:"retryAfter"`
}

// fetch is a file read (or, for sendfile, opened) in progress; requests
// for the same page that miss meanwhile wait on it instead of reading the
// file again.
type fetch struct {
	key  string
	file string
	rep  rep // validators filled in from the file read
	reqs []*http.Request
	// anyClient: an opened file's representation also answers clients
	// that accept gzip (see openFile).
	anyClient bool
}

// cacheMiss is the CacheMiss stage: it maps a missed path to a file under
// the document root (index files, directory redirects, no escape from the
// root), reads the file through asyncFile (aio.FileIO.ReadFile; the
// completion comes back to this stage), inserts it into the page cache and
// answers every request that waited for it. A file larger than MaxObject
// is streamed instead (see transfer). It also revalidates cached pages
// against their files.
type cacheMiss struct {
	srv   *Server
	log   *slog.Logger
	args  missArgs
	site  *Site
	cache *PageCache
	gz    *gzipper // nil: no compression
	fio   *aio.FileIO
	self  sink.Sink
	send  sendFunc
	// maxRead is asyncFile's ReadFile limit, if configured (0: unknown).
	maxRead int64

	chunkOnce sync.Once
	chunk     int64 // the pieces' size: args.Chunk, clamped (see chunkSize)

	mu       sync.Mutex
	inflight map[string]*fetch
	opening  map[string]*fetch // files being opened for the open-file cache
	// lines holds, per line of a connection, the last of its streamed
	// transfers: a line's transfers run one after the other (see
	// transfer and lineOf).
	lines map[transferLine]*transfer
}

// h2TransferLines is how many streamed transfers an HTTP/2 connection
// runs at once: its streams are spread over that many lines, so that the
// misses of concurrent streams do not wait for one another (a stream
// whose client reads slowly holds up only its line), while a connection
// still holds at most that many open files and twice as many chunks.
const h2TransferLines = 8

// transferLine is a line of streamed transfers: an HTTP/1.1 connection
// has one (its responses go out in request order anyway), an HTTP/2
// connection h2TransferLines.
type transferLine struct {
	conn *http.Connection
	lane uint64
}

// lineOf is the line req's transfer waits in: on HTTP/2, by stream
// (client streams are odd: 1, 3, 5... take lanes 0, 1, 2...).
func lineOf(conn *http.Connection, req *http.Request) transferLine {
	if !conn.HTTP2() {
		return transferLine{conn: conn}
	}
	return transferLine{conn: conn, lane: req.Seq / 2 % h2TransferLines}
}

func (h *cacheMiss) Init(c *stage.Context) error {
	h.log = h.srv.logger(c)
	h.args = missArgs{MaxObject: 1 << 20, Chunk: 256 << 10, SendfileMin: defaultSendfileMin, Send: StageHttpSend, RetryAfter: time.Second}
	if err := c.DecodeArgs(&h.args); err != nil {
		return err
	}
	if h.args.Chunk <= 0 {
		return c.ArgError(fmt.Errorf("chunk must be positive, got %v", h.args.Chunk), "chunk")
	}
	root := h.args.Root
	if h.srv.opts.Root != "" {
		root = h.srv.opts.Root
	}
	if root == "" {
		return c.ArgError(errors.New("no document root (set it here or with Options.Root, haboob -root)"), "root")
	}
	var err error
	if h.site, err = NewSite(SiteConfig{Root: root, Index: h.args.Index}); err != nil {
		if h.srv.opts.Root != "" {
			return err // the root came from the command line, not the file
		}
		return c.ArgError(err, "root")
	}
	h.srv.mu.Lock()
	h.cache = h.srv.cache
	h.gz = h.srv.gz
	h.srv.site = h.site
	h.srv.mu.Unlock()
	if h.cache == nil {
		return fmt.Errorf("haboob: CacheMiss needs the PageCache stage, declared before it")
	}
	h.site.checks.period = int64(h.cache.recheck / 2)
	fio, err := aio.Files(c.Manager())
	if err != nil {
		return err
	}
	if h.fio, err = fio.From(c); err != nil {
		return err
	}
	if acfg, err := aio.ConfigOf(c.Manager()); err == nil && acfg.File.MaxReadFile > 0 {
		h.maxRead = int64(acfg.File.MaxReadFile)
	}
	if hs, err := h.srv.HTTP(); err == nil {
		if lim := chunkLimit(hs); lim > 0 && int64(h.args.Chunk) > lim {
			return c.ArgError(fmt.Errorf("chunk %v is above %v, half the HTTP socket's writeThreshold bytes: two pieces of a streamed file must fit in it", h.args.Chunk, aio.ByteSize(lim)), "chunk")
		}
	}
	if h.self, err = c.Sink(c.Stage().Name()); err != nil {
		return err
	}
	if h.send, err = stageSend(c, h.args.Send); err != nil {
		return fmt.Errorf("haboob: CacheMiss send stage: %w", err)
	}
	h.inflight = map[string]*fetch{}
	h.opening = map[string]*fetch{}
	h.lines = map[transferLine]*transfer{}
	h.log.Info("haboob: serving files", "root", h.site.Root())
	return nil
}

// chunkLimit is the largest piece the HTTP server's sockets take two of
// without clogging (0: unbounded): a streamed file keeps two pieces
// outstanding.
func chunkLimit(hs *http.Server) int64 {
	b := int64(hs.Config().Socket.WriteThreshold.Bytes)
	switch {
	case b < 0:
		return 0
	case b == 0:
		b = aio.DefaultMaxWriteBytes
	}
	return max(b/2, 1)
}

// chunkSize is the size of a streamed file's pieces: args.Chunk, clamped
// to chunkLimit when the HTTP server was not started yet at Init (CacheMiss
// declared before HttpRecv) and so could not be checked then.
func (h *cacheMiss) chunkSize() int64 {
	h.chunkOnce.Do(func() {
		h.chunk = int64(h.args.Chunk)
		hs, err := h.srv.HTTP()
		if err != nil {
			return
		}
		if lim := chunkLimit(hs); lim > 0 && h.chunk > lim {
			h.log.Warn("haboob: CacheMiss: chunk is more than half the HTTP socket's write threshold; using half the threshold",
				"chunk", h.args.Chunk, "using", aio.ByteSize(lim))
			h.chunk = lim
		}
	})
	return h.chunk
}

func (h *cacheMiss) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		switch ev := e.(type) {
		case *http.Request:
			h.miss(ev)
		case aio.FileRead:
			h.loaded(ev)
		case aio.FileOpened:
			h.opened(ev)
		case aio.IOError:
			if ev.Op == aio.OpOpen {
				h.openFailed(ev)
				continue
			}
			h.failed(ev)
		case checkDue:
			pages, files := h.cache.takeDue()
			for _, p := range pages {
				h.revalidate(p)
			}
			for _, e := range files {
				h.revalidateFile(e)
			}
		default:
			h.log.Warn("haboob: CacheMiss: unexpected event", "type", fmt.Sprintf("%T", e))
		}
	}
	return nil
}

func (h *cacheMiss) reply(req *http.Request, resp *http.Response) {
	send(h.send, &http.Reply{Req: req, Resp: resp}, h.args.RetryAfter)
}

// sendReply hands a reply to the send stage (503 if it refuses).
func (h *cacheMiss) sendReply(r *http.Reply) { send(h.send, r, h.args.RetryAfter) }

// cacheable reports whether a file of size bytes is read whole and cached
// (else it is streamed).
func (h *cacheMiss) cacheable(size int64) bool {
	return size <= int64(h.args.MaxObject) && (h.maxRead <= 0 || size <= h.maxRead)
}

// sendable reports whether a file of size bytes is sent with sendfile
// (where the connection can) rather than read and cached.
func (h *cacheMiss) sendable(size int64) bool {
	return size >= int64(h.args.SendfileMin) || !h.cacheable(size)
}

// cached answers req from the page cache if it can: the gzip variant for
// a client that accepts gzip (compressing the identity page if that is
// its variant), else the identity page. It reports whether it answered.
func (h *cacheMiss) cached(req *http.Request, gz bool) bool {
	if gz {
		if q, ok := h.cache.get(gzipKey(req.Path), false); ok {
			h.sendReply(staticReply(req, q))
			return true
		}
	}
	p, ok := h.cache.get(req.Path, false)
	if !ok {
		return false
	}
	switch {
	case !gz || p.rep.gz == gzipNone:
		h.sendReply(staticReply(req, p))
	case p.rep.gz == gzipDynamic:
		h.gz.serve(req, p, h.sendReply)
	default: // a .gz sibling not cached: read below
		p.Release()
		return false
	}
	return true
}

func (h *cacheMiss) miss(req *http.Request) {
	key := req.Path
	gz := h.gz.accepts(req)
	if h.cached(req, gz) { // another request brought it in meanwhile
		return
	}
	if gz && h.join(gzipKey(key), req) || h.join(key, req) {
		return
	}
	t, err := h.site.Resolve(key)
	switch {
	case errors.Is(err, ErrOutsideRoot):
		h.reply(req, http.Forbidden())
		return
	case errors.Is(err, ErrNotFound):
		h.cache.files.remove(key) // a removed file's descriptor is not kept
		h.cache.files.remove(gzipKey(key))
		h.reply(req, http.NotFound())
		return
	case err != nil:
		h.log.Error("haboob: resolve", "path", key, "err", err)
		h.reply(req, http.InternalServerError())
		return
	case t.Redirect != "":
		loc := t.Redirect
		if req.RawQuery != "" {
			loc += "?" + req.RawQuery
		}
		h.reply(req, http.Redirect(loc, http.StatusMovedPermanently))
		return
	}
	ctype := ContentType(t.File)
	var sib Target
	hasSib := false
	if h.gz.static() {
		sib, hasSib = h.site.Sibling(t, ".gz")
	}
	size := t.Info.Size()
	kind := h.gz.kind(ctype, size, h.cacheable(size), hasSib)
	// Over TLS every byte is copied to be encrypted: a cached page saves
	// h2 the pread of each chunk, so it sends files only above maxObject.
	sends := sendsFiles(req) && (req.Conn.(*http.Connection).Socket().SendsFiles() || !h.cacheable(size))
	if gz && kind == gzipStatic {
		r := rep{ctype: ctype, enc: "gzip", vary: true}
		if sends && h.sendable(sib.Info.Size()) {
			h.sendFile(gzipKey(key), sib.File, r, sib.Info, false, req)
			return
		}
		if !h.cacheable(sib.Info.Size()) {
			h.stream(req, sib.File, r, sib.Info)
			return
		}
		h.read(gzipKey(key), sib.File, r, req)
		return
	}
	r := rep{ctype: ctype, gz: kind, vary: kind != gzipNone || h.gz.compressible(ctype)}
	if sends && h.sendable(size) && (!gz || kind != gzipDynamic) {
		h.sendFile(key, t.File, r, t.Info, kind == gzipNone, req)
		return
	}
	if !h.cacheable(size) {
		h.stream(req, t.File, r, t.Info)
		return
	}
	h.read(key, t.File, r, req)
}

// read reads file whole through asyncFile, to be cached under key and
// to answer req and the requests that join it meanwhile.
func (h *cacheMiss) read(key, file string, r rep, req *http.Request) {
	f := &fetch{key: key, file: file, rep: r, reqs: []*http.Request{req}}
	h.mu.Lock()
	if g := h.inflight[key]; g != nil {
		g.reqs = append(g.reqs, req)
		h.mu.Unlock()
		return
	}
	h.inflight[key] = f
	h.mu.Unlock()
	if err := h.fio.ReadFile(file, h.self, f); err != nil {
		for _, r := range h.forget(f) {
			unavailable(r, h.args.RetryAfter)
		}
	}
}

// join adds req to a read of the same page in progress.
func (h *cacheMiss) join(key string, req *http.Request) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.inflight[key]; f != nil {
		f.reqs = append(f.reqs, req)
		return true
	}
	return false
}

// forget ends a fetch and returns the requests waiting on it.
func (h *cacheMiss) forget(f *fetch) []*http.Request { return h.take(h.inflight, f) }

// take ends f, one of m's (inflight or opening), and returns the
// requests waiting on it.
func (h *cacheMiss) take(m map[string]*fetch, f *fetch) []*http.Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m[f.key] == f {
		delete(m, f.key)
	}
	reqs := f.reqs
	f.reqs = nil
	return reqs
}

func (h *cacheMiss) loaded(ev aio.FileRead) {
	f, ok := ev.Tag.(*fetch)
	if !ok {
		h.log.Warn("haboob: CacheMiss: file read without a fetch", "path", ev.Path)
		return
	}
	reqs := h.forget(f)
	r := repOf(f.rep, ev.Info)
	data := ev.Data
	if buf, ok := h.cache.Reuse(len(data)); ok {
		copy(buf, data)
		data = buf
	}
	p := h.cache.insertRep(f.key, data, r)
	p.checked.Store(sink.Nanotime())
	for _, req := range reqs {
		if r.enc == "" && r.gz != gzipNone && h.gz.accepts(req) {
			if r.gz == gzipDynamic { // compressed here, once
				p.Retain()
				h.gz.serve(req, p, h.sendReply)
			} else { // the .gz sibling is read next
				h.miss(req)
			}
			continue
		}
		p.Retain()
		h.sendReply(staticReply(req, p))
	}
	p.Release()
}

func (h *cacheMiss) failed(ev aio.IOError) {
	f, ok := ev.Tag.(*fetch)
	if !ok {
		h.log.Warn("haboob: CacheMiss: file error without a fetch", "path", ev.Path, "err", ev.Err)
		return
	}
	if errors.Is(ev.Err, aio.ErrFileTooLarge) { // it grew since it was resolved
		for _, req := range h.forget(f) {
			h.stream(req, f.file, f.rep, nil)
		}
		return
	}
	resp := errorResponse(h.log, ev.Path, ev.Err)
	for _, req := range h.forget(f) {
		h.reply(req, resp())
	}
}

// errorResponse maps a file error to the answer's constructor.
func errorResponse(log *slog.Logger, path string, err error) func() *http.Response {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, aio.ErrIsDirectory):
		return http.NotFound // the file went away since it was resolved
	case errors.Is(err, fs.ErrPermission):
		return http.Forbidden
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		// Out of descriptors for a while (the socket layer counts and logs
		// it): try again soon, rather than one ERROR line per request.
		return func() *http.Response { return http.ServiceUnavailable(time.Second) }
	}
	log.Error("haboob: read", "path", path, "err", err)
	return http.InternalServerError
}

// revalidate drops a cached page whose file changed or went away: for a
// gzip variant, the .gz sibling it was read from or the file it was
// compressed from (or a .gz sibling appeared beside it); for an identity
// page, also when a .gz sibling appeared or went away (its gzip variant
// changed).
// Only p's immutable fields (Key, Validators, rep) are read.
func (h *cacheMiss) revalidate(p *Page) {
	path, isGzip := strings.CutPrefix(p.Key, "gzip:")
	t, err := h.site.recheck(path)
	fresh := err == nil && t.Redirect == ""
	if fresh {
		switch {
		case isGzip && p.rep.noRanges: // compressed on the fly; a .gz sibling would win
			fresh = ETag(t.Info) == p.rep.src
			if fresh && h.gz.static() {
				_, ok := h.site.recheckSibling(t, ".gz")
				fresh = !ok
			}
		case isGzip:
			sib, ok := h.site.recheckSibling(t, ".gz")
			fresh = ok && h.gz.static() && ETag(sib.Info) == p.rep.src
		default:
			fresh = ETag(t.Info) == p.rep.src
			if fresh && h.gz.static() {
				_, ok := h.site.recheckSibling(t, ".gz")
				fresh = ok == (p.rep.gz == gzipStatic)
			}
		}
	}
	if !fresh {
		h.cache.RemoveStale(p.Key, p.Validators)
	}
}
