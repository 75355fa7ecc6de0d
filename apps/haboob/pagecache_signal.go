package haboob

import (
	"context"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// The page cache gives memory back when the runtime signals that memory
// runs high (stage.SignalMemory, MemoryHigh): it evicts its least
// recently used pages down to ShrinkFraction of the bytes it holds, and
// drops the evicted pages' buffers it keeps for reuse, so that the
// garbage collector can return them. Pages are cached again as they are
// asked for; the next crossing of the high mark shrinks it again.

// ShrinkFraction is the share of its bytes the page cache keeps when
// memory runs high.
const ShrinkFraction = 0.5

// Shrink evicts the least recently used pages until the cache holds at
// most targetBytes, and forgets the buffers kept for reuse. Pages being
// sent keep their buffers until released. It returns the number of pages
// evicted (counted in Stats().Evictions).
func (c *PageCache) Shrink(targetBytes int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for c.size > max(targetBytes, 0) && c.lru.len() > 0 {
		old, _ := c.lru.oldest()
		c.removeLocked(old)
		c.evictions.Add(1)
		n++
	}
	clear(c.free[:])
	c.freeBytes = 0
	return n
}

// ShrinkCacheOnMemory has the page cache shrink (Shrink to
// ShrinkFraction of its bytes) every time m raises stage.SignalMemory at
// MemoryHigh. The returned function cancels it. A manager made by
// stage.Load or stage.Parse with a PageCache stage does this by itself
// (the service "haboob.pagecache"); cmd/haboob calls it.
func (s *Server) ShrinkCacheOnMemory(m *stage.Manager) (unsubscribe func()) {
	log := m.Logger()
	if s.opts.Logger != nil {
		log = s.opts.Logger
	}
	return m.SubscribeFunc(stage.SignalMemory, func(ev sink.Event) {
		sig, ok := ev.(stage.MemorySignal)
		if !ok || sig.Level != stage.MemoryHigh {
			return
		}
		c := s.Cache()
		if c == nil {
			return // PageCache not initialized yet
		}
		before := c.Stats().Bytes
		n := c.Shrink(int64(float64(before) * ShrinkFraction))
		log.Info("haboob: memory high: page cache shrunk", "evicted", n, "bytes_before", before, "bytes", c.Stats().Bytes, "used", sig.Used, "limit", sig.Limit)
	})
}

// cacheOnMemory is the service that runs ShrinkCacheOnMemory for the
// manager's PageCache stage.
type cacheOnMemory struct {
	m           *stage.Manager
	srv         *Server
	unsubscribe func()
}

func (c *cacheOnMemory) Start(context.Context) error {
	c.unsubscribe = c.srv.ShrinkCacheOnMemory(c.m)
	return nil
}

func (c *cacheOnMemory) Shutdown(context.Context) error {
	if c.unsubscribe != nil {
		c.unsubscribe()
	}
	return nil
}

// pageCacheServer returns the Server of m's PageCache stage, if it has
// one (its handler may be wrapped, by otelstage say).
func pageCacheServer(m *stage.Manager) (*Server, bool) {
	for _, st := range m.Stages() {
		h := st.Handler()
		for {
			if pc, ok := h.(*pageCache); ok {
				return pc.srv, true
			}
			w, ok := h.(interface{ Unwrap() stage.Handler })
			if !ok {
				break
			}
			h = w.Unwrap()
		}
	}
	return nil, false
}

func init() {
	stage.RegisterService("haboob.pagecache", func(m *stage.Manager) (stage.Service, error) {
		srv, ok := pageCacheServer(m)
		if !ok {
			return nil, nil
		}
		return &cacheOnMemory{m: m, srv: srv}, nil
	})
}
