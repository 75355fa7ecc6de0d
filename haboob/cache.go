package haboob

import (
	"container/list"
	"math/bits"
	"sync"
	"sync/atomic"
)

// Page is a cached file: its bytes and the metadata needed to answer
// requests for it. A Page handed out by Cache.Get is retained: call Release
// when its bytes have been written, so its buffer can be reused once evicted.
type Page struct {
	Key         string
	Body        []byte
	ContentType string
	Validators

	refs    atomic.Int32 // holders: the cache itself (while cached) plus Get callers
	cache   *PageCache
	element *list.Element
}

// Release gives back a Page obtained from Get or Insert.
func (p *Page) Release() {
	if p.refs.Add(-1) == 0 && p.cache != nil {
		p.cache.recycle(p.Body)
	}
}

// PageCache is Haboob's in-memory page cache: bounded by a size in bytes,
// evicting the least recently used pages, and reusing evicted pages' buffers
// for new pages (thesis §6.1.1).
type PageCache struct {
	max int64

	mu    sync.Mutex
	pages map[string]*Page
	lru   *list.List // front: most recently used
	size  int64

	free      [40][][]byte // reusable buffers by power-of-two capacity class
	freeBytes int64        // capacity held in free, at most max

	hits, misses, evictions, reused atomic.Uint64
}

// NewPageCache returns a cache holding at most maxBytes of page bodies
// (≤ 0 → 64 MiB).
func NewPageCache(maxBytes int64) *PageCache {
	if maxBytes <= 0 {
		maxBytes = 64 << 20
	}
	return &PageCache{max: maxBytes, pages: map[string]*Page{}, lru: list.New()}
}

// Get returns the cached page for key, retained for the caller.
func (c *PageCache) Get(key string) (*Page, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pages[key]
	if !ok {
		c.misses.Add(1)
		return nil, false
	}
	c.hits.Add(1)
	c.lru.MoveToFront(p.element)
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
	class := sizeClass(n)
	c.mu.Lock()
	if free := c.free[class]; len(free) > 0 {
		b := free[len(free)-1]
		c.free[class] = free[:len(free)-1]
		c.freeBytes -= int64(cap(b))
		c.mu.Unlock()
		c.reused.Add(1)
		return b[:n]
	}
	c.mu.Unlock()
	return make([]byte, n, 1<<class)
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
	p := &Page{Key: key, Body: body, ContentType: contentType, Validators: v}
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
	for c.size+int64(len(body)) > c.max && c.lru.Len() > 0 {
		c.removeLocked(c.lru.Back().Value.(*Page))
		c.evictions.Add(1)
	}
	p.element = c.lru.PushFront(p)
	c.pages[key] = p
	c.size += int64(len(body))
	c.mu.Unlock()
	return p
}

// removeLocked drops p from the cache; its buffer is recycled once the last
// holder releases it. The caller holds c.mu.
func (c *PageCache) removeLocked(p *Page) {
	c.lru.Remove(p.element)
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
// never hold more than the cache's own budget.
func (c *PageCache) recycleLocked(b []byte) {
	if cap(b) == 0 || cap(b)&(cap(b)-1) != 0 {
		return // not from Buffer: let the GC have it
	}
	class := sizeClass(cap(b))
	if len(c.free[class]) >= 16 || c.freeBytes+int64(cap(b)) > c.max {
		return
	}
	c.freeBytes += int64(cap(b))
	c.free[class] = append(c.free[class], b[:cap(b)])
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
}

// Stats returns the cache's counters.
func (c *PageCache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{
		Pages: len(c.pages), Bytes: c.size, MaxBytes: c.max,
		Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(), Reused: c.reused.Load(),
	}
}
