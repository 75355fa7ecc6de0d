package haboob_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestPageCacheShrinksOnMemorySignal: Haboob's page cache, filled over a
// socket, gives back half its bytes when the runtime signals memory-high
// (a fake source crossing the high mark), not again while memory stays
// between the marks nor on memory-ok; the degrading Checksum stage's rt
// predicate is under pressure meanwhile; pages are served, and cached
// again, afterwards.
func TestPageCacheShrinksOnMemorySignal(t *testing.T) {
	root := t.TempDir()
	const pages = 8
	for i := range pages {
		write(t, filepath.Join(root, fmt.Sprintf("p%d.html", i)), strings.Repeat("x", 2000))
	}
	s := startSite(t, testConfig, haboob.Options{Root: root}, nil)
	c := s.client(t)
	get := func(i int) {
		t.Helper()
		if resp, body := s.do(t, c, "GET", fmt.Sprintf("/p%d.html", i)); resp.StatusCode != 200 || len(body) != 2000 {
			t.Fatalf("GET /p%d.html: %d, %d bytes", i, resp.StatusCode, len(body))
		}
	}
	for i := range pages {
		get(i)
	}
	cache := s.hb.Cache()
	full := cache.Stats()
	if full.Pages < pages || full.Bytes < pages*2000 { // and gzip copies
		t.Fatalf("cache before the signal: %+v, want at least %d pages of 2000 bytes", full, pages)
	}

	var used uint64 // the fake source's reading, against a limit of 1000
	src := stage.MemorySourceFunc(func() (uint64, uint64) { return used, 1000 })
	mm := stage.NewMemoryMonitor(s.m, src, stage.MemoryConfig{High: 0.9, Low: 0.8})
	checksum, _ := s.m.Stage("Checksum")
	rt := enqueuepred.ResponseTimeOf(checksum.Sink().Predicate())
	steps := []struct {
		used     uint64
		shrinks  bool // the cache has at most half the bytes it had
		pressure bool
	}{
		{500, false, false},
		{950, true, true}, // memory-high: shrunk to half
		{850, true, true}, // still high
		{700, true, false},
	}
	var shrunk haboob.CacheStats
	for i, st := range steps {
		used = st.used
		mm.Check() // SubscribeFunc: the cache has shrunk when Check returns
		got := cache.Stats()
		switch {
		case !st.shrinks && got.Bytes != full.Bytes:
			t.Fatalf("step %d (used %d): cache holds %d bytes, want all %d", i, st.used, got.Bytes, full.Bytes)
		case st.shrinks && (got.Bytes > full.Bytes/2 || got.Bytes == 0):
			t.Fatalf("step %d (used %d): cache holds %d bytes, want (0, %d]", i, st.used, got.Bytes, full.Bytes/2)
		case st.shrinks && shrunk.Pages != 0 && got != shrunk:
			t.Fatalf("step %d (used %d): shrunk again: %+v after %+v", i, st.used, got, shrunk)
		case st.shrinks:
			shrunk = got
		}
		if rt.Pressure() != st.pressure {
			t.Fatalf("step %d: Checksum's rt under pressure: %v, want %v", i, rt.Pressure(), st.pressure)
		}
	}
	if ev := shrunk.Evictions - full.Evictions; ev != uint64(full.Pages-shrunk.Pages) {
		t.Fatalf("%d evictions for %d pages evicted", ev, full.Pages-shrunk.Pages)
	}
	for i := range pages { // the evicted pages are served and cached again
		get(i)
	}
	if got := cache.Stats(); got.Pages != full.Pages {
		t.Fatalf("after the signal: %d pages cached, want %d again", got.Pages, full.Pages)
	}
}

// TestPageCacheShrink: Shrink evicts least recently used pages first.
func TestPageCacheShrink(t *testing.T) {
	tests := []struct {
		target int64
		kept   []string
	}{
		{1 << 20, []string{"a", "b", "c"}},
		{20, []string{"b", "c"}}, // a is the least recently used
		{10, []string{"c"}},      // then b
		{0, nil},
		{-5, nil},
	}
	for _, tt := range tests {
		c := haboob.NewPageCache(1 << 20)
		for _, k := range []string{"a", "c", "b"} {
			c.Insert(k, []byte("0123456789"), "text/plain", haboob.Validators{}).Release()
		}
		if p, ok := c.Get("c"); ok { // c is used after b
			p.Release()
		}
		c.Shrink(tt.target)
		var kept []string
		for _, k := range []string{"a", "b", "c"} {
			if _, ok := c.Peek(k); ok {
				kept = append(kept, k)
			}
		}
		if fmt.Sprint(kept) != fmt.Sprint(tt.kept) {
			t.Errorf("Shrink(%d) kept %v, want %v", tt.target, kept, tt.kept)
		}
	}
}
