package haboob

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
)

// Page is a cached file: its bytes and the metadata needed to answer
// requests for it. A Page handed out by Cache.Get is retained: call Release
// when its bytes have been written, so its buffer can be reused once evicted.
type Page struct {
	Key         string
	Body        []byte
	ContentType string
	Validators
	// Header holds the fields of a 200 response for the page
	// (Content-Type, Content-Encoding and Vary for a gzip variant,
	// Last-Modified, ETag, Accept-Ranges unless Range is ignored), built
	// once at Insert and shared, read-only, by every response.
	Header http.Header
	// prepared is Header formatted once (http.PrepareHeader).
	prepared *http.PreparedHeader
	// Encoding is the page's Content-Encoding: "" for a file's bytes,
	// "gzip" for its gzip variant (key gzipKey).
	Encoding string

	rep    rep          // how its responses describe it
	refs   atomic.Int32 // holders: the cache itself (while cached) plus Get callers
	cache  *PageCache
	recent recencyMark
	done   func(error) // Release as a reply's Done callback
	// ok and okBody are the 200 response to a GET or HEAD of the whole
	// page and its body slice, made at Insert and shared, read-only, by
	// every such reply (pageReply), so that a hit allocates no response.
	ok      http.Response
	okBody  [1][]byte
	checked atomic.Int64 // sink.Nanotime of the last revalidation
	queued  atomic.Bool  // its check waits for CacheMiss (see dueChecks)
}

// Retain adds a holder: one more Release is due.
func (p *Page) Retain() { p.refs.Add(1) }

// Release gives back a Page obtained from Get or Insert (or Retain).
func (p *Page) Release() {
	if p.refs.Add(-1) == 0 && p.cache != nil {
		p.cache.recycle(p.Body)
	}
}

// ReleaseFunc returns Release as an http.Reply Done callback (made once per
// page, so that replies do not allocate one).
func (p *Page) ReleaseFunc() func(error) { return p.done }

// PageCache is Haboob's in-memory page cache: bounded by a size in bytes,
// evicting the least recently used pages (exact but for the order within
// the most recent quarter, see recency), and reusing evicted pages'
// buffers for new pages (thesis §6.1.1).
type PageCache struct {
	max int64

	mu    sync.Mutex
	pages map[string]*Page
	lru   recency[*Page]
	size  int64

	free      [40][][]byte // reusable buffers by power-of-two capacity class
	freeBytes int64        // capacity held in free, at most max

	hits, misses, evictions, reused atomic.Uint64

	// files is the open-file cache of the files left to the OS page cache
	// (set by the PageCache stage; NewPageCache makes a default one).
	files *openFiles
	// recheck is how often the stages check a cached page or open file
	// against its file (the shorter of PageCache's revalidate and its
	// open files' valid; 0: not set); CacheMiss reuses a directory's
	// checks for half of it (see dirChecks).
	recheck time.Duration
	// due gathers the checks that are due for CacheMiss (see dueChecks).
	due dueChecks
}

// NewPageCache returns a cache holding at most maxBytes of page bodies
// (≤ 0 → 64 MiB).
func NewPageCache(maxBytes int64) *PageCache {
	if maxBytes <= 0 {
		maxBytes = 64 << 20
	}
	return &PageCache{max: maxBytes, pages: map[string]*Page{}, files: newOpenFiles(openFileArgs{})}
}

// Get returns the cached page for key, retained for the caller.
func (c *PageCache) Get(key string) (*Page, bool) { return c.get(key, true) }

// get is Get; countMiss says whether a miss is counted (a second look
// after a counted miss is not another miss).
func (c *PageCache) get(key string, countMiss bool) (*Page, bool) {
	return c.lookup(key, countMiss, 0, 0)
}

// getFresh returns the cached page for key, retained for the caller, if
// its file was checked no more than maxAge before now (maxAge <= 0: any
// age). Only a page returned counts as a hit: a caller that finds nothing
// passes the request on to a lookup that counts it.
func (c *PageCache) getFresh(key string, now int64, maxAge time.Duration) (*Page, bool) {
	return c.lookup(key, false, now, maxAge)
}

// lookup is get and getFresh: a page checked more than maxAge (> 0)
// before now is not returned, and counts as nothing.
func (c *PageCache) lookup(key string, countMiss bool, now int64, maxAge time.Duration) (*Page, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pages[key]
	if !ok {
		if countMiss {
			c.misses.Add(1)
		}
		return nil, false
	}
	if maxAge > 0 && now-p.checked.Load() > int64(maxAge) {
		return nil, false
	}
	c.hits.Add(1)
	c.lru.used(&p.recent)
	p.refs.Add(1)
	return p, true
}

// Peek reports the size of a cached page without touching recency, for
// ordering a batch (shortest first).
func (c *PageCache) Peek(key string) (size int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pages[key]; ok {
		return len(p.Body), true
	}
	return 0, false
}

// Buffer returns a buffer of length n, reusing an evicted page's buffer
// when one of the right size class is free. Fill it and pass it to Insert.
func (c *PageCache) Buffer(n int) []byte {
	if b, ok := c.Reuse(n); ok {
		return b
	}
	return make([]byte, n, 1<<sizeClass(n))
}

// Reuse returns an evicted page's buffer of length n, if one of the right
// size class is free. A caller that already holds the bytes elsewhere (a
// file read) copies them in, so that the cache's memory is recycled rather
// than left to the garbage collector.
func (c *PageCache) Reuse(n int) ([]byte, bool) {
	class := sizeClass(n)
	c.mu.Lock()
	if free := c.free[class]; len(free) > 0 {
		b := free[len(free)-1]
		free[len(free)-1] = nil
		c.free[class] = free[:len(free)-1]
		c.freeBytes -= int64(cap(b))
		c.mu.Unlock()
		c.reused.Add(1)
		return b[:n], true
	}
	c.mu.Unlock()
	return nil, false
}

func sizeClass(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// Insert caches body (ideally from Buffer) under key and returns the page,
// retained for the caller. A page larger than the whole cache is returned
// uncached. Older pages are evicted to make room.
func (c *PageCache) Insert(key string, body []byte, contentType string, v Validators) *Page {
	return c.insertRep(key, body, rep{ctype: contentType, v: v, src: v.ETag})
}

// insertRep is Insert for a representation described by r.
func (c *PageCache) insertRep(key string, body []byte, r rep) *Page {
	header := r.header()
	p := &Page{Key: key, Body: body, ContentType: r.ctype, Validators: r.v, Header: header, prepared: http.PrepareHeader(header), Encoding: r.enc, rep: r}
	p.done = func(error) { p.Release() }
	p.ok = http.Response{Status: http.StatusOK, Header: header, Prepared: p.prepared, ContentLength: int64(len(body))}
	p.okBody[0] = body
	p.refs.Store(1) // the caller's
	if int64(len(body)) > c.max {
		return p
	}
	p.cache = c
	p.refs.Add(1) // the cache's
	c.mu.Lock()
	if old, ok := c.pages[key]; ok {
		c.removeLocked(old)
	}
	for c.size+int64(len(body)) > c.max && c.lru.len() > 0 {
		old, _ := c.lru.oldest()
		c.removeLocked(old)
		c.evictions.Add(1)
	}
	c.lru.add(&p.recent, p)
	c.pages[key] = p
	c.size += int64(len(body))
	c.mu.Unlock()
	return p
}

// removeLocked drops p from the cache; its buffer is recycled once the last
// holder releases it. The caller holds c.mu.
func (c *PageCache) removeLocked(p *Page) {
	c.lru.remove(&p.recent)
	delete(c.pages, p.Key)
	c.size -= int64(len(p.Body))
	if p.refs.Add(-1) == 0 {
		c.recycleLocked(p.Body)
	}
}

func (c *PageCache) recycle(b []byte) {
	c.mu.Lock()
	c.recycleLocked(b)
	c.mu.Unlock()
}

// recycleLocked keeps a buffer for reuse, bounded so that free buffers
// never hold more than the cache's own budget. A buffer of capacity c is
// filed under the largest class 2^k <= c, so that whatever Buffer or Reuse
// takes from class k holds 2^k bytes.
func (c *PageCache) recycleLocked(b []byte) {
	if cap(b) == 0 {
		return
	}
	class := bits.Len(uint(cap(b))) - 1
	if len(c.free[class]) >= 16 || c.freeBytes+int64(cap(b)) > c.max {
		return
	}
	c.freeBytes += int64(cap(b))
	c.free[class] = append(c.free[class], b[:cap(b)])
}

// Remove drops key from the cache (its buffer is recycled once no reply
// holds it).
func (c *PageCache) Remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pages[key]; ok {
		c.removeLocked(p)
	}
}

// RemoveStale drops key if the cached page is still the version with
// validators old (a newer version inserted meanwhile stays).
func (c *PageCache) RemoveStale(key string, old Validators) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pages[key]; ok && p.ETag == old.ETag && p.ModTime.Equal(old.ModTime) {
		c.removeLocked(p)
	}
}

// Invalidate drops key if cached with other validators (the file changed).
func (c *PageCache) Invalidate(key string, v Validators) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pages[key]; ok && (p.ETag != v.ETag || !p.ModTime.Equal(v.ModTime)) {
		c.removeLocked(p)
	}
}

// CacheStats are the page cache's counters.
type CacheStats struct {
	Pages                           int
	Bytes, MaxBytes                 int64
	Hits, Misses, Evictions, Reused uint64
	// The open-file cache: files kept open for sendfile, and how often
	// a request found its file there (valid or revalidated) or not.
	OpenFiles                                   int
	OpenFileHits, OpenFileMisses, OpenFileStale uint64
}

// Stats returns the cache's counters.
func (c *PageCache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{
		Pages: len(c.pages), Bytes: c.size, MaxBytes: c.max,
		Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(), Reused: c.reused.Load(),
		OpenFiles: c.files.len(), OpenFileHits: c.files.hits.Load(), OpenFileMisses: c.files.misses.Load(), OpenFileStale: c.files.stale.Load(),
	}
}
