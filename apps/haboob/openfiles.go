package haboob

import (
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
)

// openFileArgs configure the open-file cache (PageCache's openFiles
// args), as nginx's open_file_cache: how many files are kept open and for
// how long an entry is used before CacheMiss checks its path again.
type openFileArgs struct {
	// Max is the number of files kept open (default 4096; negative: none
	// kept, every request for a file sent with sendfile opens it).
	Max int `yaml:"max"`
	// Valid is how long an entry answers requests before its path is
	// resolved and stat'ed again (default 2s, like Revalidate): a file
	// replaced or changed is served from its old descriptor for this long
	// and until CacheMiss has checked it (PageCache serves the entry
	// while the check runs, as it does a page; with PageCache's
	// revalidate negative, an expired entry's request goes to CacheMiss).
	Valid time.Duration `yaml:"valid"`
}

func (a openFileArgs) withDefaults() openFileArgs {
	if a.Max == 0 {
		a.Max = 4096
	}
	if a.Valid <= 0 {
		a.Valid = 2 * time.Second
	}
	return a
}

// openFile is a cached open file: the descriptor the responses for one
// representation send with sendfile, the result of resolving its path
// and its fstat. Immutable once cached but for checked and queued.
type openFile struct {
	key    string
	file   *aio.SharedFile // the cache's reference
	info   fs.FileInfo
	rep    rep
	header http.Header // the fields of a 200, built once
	// prepared is header formatted once (http.PrepareHeader).
	prepared *http.PreparedHeader
	// anyClient: the representation is also the answer to clients that
	// accept gzip (the file has no gzip variant).
	anyClient bool
	checked   atomic.Int64 // sink.Nanotime the path was last resolved to this file
	queued    atomic.Bool  // its check waits for CacheMiss (see dueChecks)
	recent    recencyMark
	// ok is the 200 response to a GET of the whole file (its File the
	// whole file's body), okHead the one to a HEAD, made by newOpenFile
	// and shared, read-only, by every such reply (fileAnswer): each reply
	// holds its own reference to file, not to these.
	ok, okHead http.Response
	okBody     http.FileBody
}

// newOpenFile is the open-file cache's entry for file (one reference,
// handed to the entry), with its responses built once.
func newOpenFile(key string, file *aio.SharedFile, info fs.FileInfo, r rep, anyClient bool) *openFile {
	header := r.header()
	e := &openFile{key: key, file: file, info: info, rep: r, header: header, prepared: http.PrepareHeader(header), anyClient: anyClient}
	size := info.Size()
	e.okHead = http.Response{Status: http.StatusOK, Header: header, Prepared: e.prepared, ContentLength: size}
	e.okBody = http.FileBody{File: file, Length: size}
	e.ok = e.okHead
	e.ok.File = &e.okBody
	return e
}

// openFiles is the open-file cache: files too large for the page cache
// (or not worth copying) stay open here, bounded in number, least
// recently used evicted, so that a request for one costs no open or stat
// while its entry is valid. Each entry holds a reference to its file; a
// response holds another while it is being sent, so an evicted or
// replaced file is closed once its last response is out.
type openFiles struct {
	args openFileArgs

	mu  sync.Mutex
	m   map[string]*openFile
	lru recency[*openFile]

	hits, misses, evictions, stale atomic.Uint64
}

func newOpenFiles(args openFileArgs) *openFiles {
	return &openFiles{args: args.withDefaults(), m: map[string]*openFile{}}
}

// get returns the valid entry for key (checked no longer than Valid
// before now) with its file retained for the caller, who hands the
// reference to a response.
func (c *openFiles) get(key string, now int64) (*openFile, bool) {
	return c.find(key, now, false)
}

// find is get; with stale, an entry whose validity ran out is returned
// too (its check is due, see due).
func (c *openFiles) find(key string, now int64, stale bool) (*openFile, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !stale && now-e.checked.Load() > int64(c.args.Valid) {
		return nil, false
	}
	c.hits.Add(1)
	c.lru.used(&e.recent)
	e.file.Retain()
	return e, true
}

// revalidate looks for an entry for key whose validity ran out but that
// still describes info (the same file, unchanged, with or without a gzip
// variant as anyClient says): it is made valid again from now and
// returned retained, as get does. An entry that no longer describes the
// file is dropped.
func (c *openFiles) revalidate(key string, info fs.FileInfo, anyClient bool, now int64) (*openFile, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		c.misses.Add(1)
		return nil, false
	}
	if !sameFile(e.info, info) || e.anyClient != anyClient {
		c.stale.Add(1)
		c.misses.Add(1)
		c.removeLocked(e)
		return nil, false
	}
	c.hits.Add(1)
	e.checked.Store(now)
	c.lru.used(&e.recent)
	e.file.Retain()
	return e, true
}

// sameFile reports whether two stats describe the same, unchanged file.
func sameFile(a, b fs.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// put caches e (checked now), taking over the caller's reference to its
// file, and returns it with one more reference for the caller. With a
// cache of no entries the caller's reference is simply returned.
func (c *openFiles) put(e *openFile, now int64) *openFile {
	e.checked.Store(now)
	if c.args.Max < 0 {
		return e
	}
	e.file.Retain() // the caller's; the one passed in is the cache's
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[e.key]; ok {
		c.removeLocked(old)
	}
	for c.lru.len() >= c.args.Max && c.lru.len() > 0 {
		old, _ := c.lru.oldest()
		c.removeLocked(old)
		c.evictions.Add(1)
	}
	c.lru.add(&e.recent, e)
	c.m[e.key] = e
	return e
}

func (c *openFiles) removeLocked(e *openFile) {
	c.lru.remove(&e.recent)
	delete(c.m, e.key)
	e.file.Release()
}

// removeStale drops key's entry if it is still e (one checked and found
// changed).
func (c *openFiles) removeStale(key string, e *openFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key] == e {
		c.stale.Add(1)
		c.removeLocked(e)
	}
}

// remove drops key's entry, if any.
func (c *openFiles) remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		c.removeLocked(e)
	}
}

// purge closes every cached file (each once its responses are out).
func (c *openFiles) purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.m {
		c.removeLocked(e)
	}
}

// len is the number of files kept open.
func (c *openFiles) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// due reports whether e's validity ran out before now, and if so claims
// its check: one caller per period gets true and has the path checked
// (CacheMiss's revalidateFile) while e goes on answering.
func (c *openFiles) due(e *openFile, now int64) bool {
	last := e.checked.Load()
	return now-last > int64(c.args.Valid) && e.checked.CompareAndSwap(last, now)
}

// lookup finds the entry answering req (gz: the client accepts gzip):
// the gzip variant's, else the file's own if it serves every client.
// With stale, an entry whose validity ran out is returned too.
func (c *openFiles) lookup(path string, gz bool, now int64, stale bool) (*openFile, bool) {
	if gz {
		if e, ok := c.find(gzipKey(path), now, stale); ok {
			return e, true
		}
	}
	e, ok := c.find(path, now, stale)
	if ok && gz && !e.anyClient {
		e.file.Release()
		return nil, false
	}
	return e, ok
}

// fileReply answers req with the open file of e, whose reference (taken
// by get, revalidate or put) it hands to the response, or releases if
// the answer has no body (304, 416, HEAD).
func fileReply(req *http.Request, e *openFile) *http.Reply {
	r := fileAnswer(req, e)
	return &r
}

// fileAnswer is fileReply's answer as a value: a 200 (the common case)
// points to the entry's own response and allocates nothing; a 304, 206
// or 416 allocates its response.
func fileAnswer(req *http.Request, e *openFile) http.Reply {
	size := e.info.Size()
	if !NotModified(req, e.rep.v) && (req.Method != "GET" || e.rep.noRanges || req.Header.Get("Range") == "") {
		if e.ok.SendsBody(req) {
			return http.Reply{Req: req, Resp: &e.ok}
		}
		e.file.Release()
		return http.Reply{Req: req, Resp: &e.okHead}
	}
	resp, first, n := fileResponse(req, size, e.rep)
	if n == 0 {
		e.file.Release()
	} else {
		resp.File = &http.FileBody{File: e.file, Offset: first, Length: n}
	}
	return http.Reply{Req: req, Resp: resp}
}

// sendFileReply hands a reply with a file body on; if it is not taken,
// the file's reference is released and the request answered 503.
func sendFileReply(out sendFunc, r *http.Reply, retryAfter time.Duration) {
	if err := out(r); err == nil {
		return
	}
	if r.Resp.File != nil {
		r.Resp.File.File.Release()
	}
	unavailable(r.Req, retryAfter)
}
