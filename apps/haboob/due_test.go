package haboob

import (
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// eventSink records what is enqueued, refusing everything when full
// and the next refusals events whatever. With a gate, an enqueue first
// waits for it to close.
type eventSink struct {
	sink.Sink
	events   chan sink.Event
	gate     chan struct{}
	full     atomic.Bool
	refusals atomic.Int64
}

func (s *eventSink) EnqueueLossy(e sink.Event) bool {
	if s.gate != nil {
		<-s.gate
	}
	if s.full.Load() || s.refusals.Add(-1) >= 0 {
		return false
	}
	s.events <- e
	return true
}

// dueCache is a page cache whose due checks go to s, with a window for
// period (0: none).
func dueCache(t *testing.T, s sink.Sink, period time.Duration) *PageCache {
	c := NewPageCache(1 << 20)
	c.due.init(s, period)
	t.Cleanup(c.files.purge)
	return c
}

// cachePage caches a page for key in c.
func cachePage(c *PageCache, key string) *Page {
	p := c.Insert(key, []byte(key), "text/plain", Validators{ETag: key})
	p.Release()
	return p
}

// cacheFile caches an open file for key in c.
func cacheFile(t *testing.T, c *PageCache, key string) *openFile {
	f, info := openTemp(t, t.TempDir(), "f", 1)
	e := c.files.put(&openFile{key: key, file: f, info: info}, 0)
	e.file.Release()
	return e
}

// TestDueChecksCoalesced: the checks that come due before CacheMiss takes
// them share one hand-off; after a take the next one is handed over
// again; a hand-off CacheMiss refuses keeps its checks for the next
// one, and does not stop later hand-offs.
func TestDueChecksCoalesced(t *testing.T) {
	s := &eventSink{events: make(chan sink.Event, 16)}
	c := dueCache(t, s, 0) // no window: handed over at once
	p1, p2, p3 := cachePage(c, "/1"), cachePage(c, "/2"), cachePage(c, "/3")
	e := cacheFile(t, c, "/f")
	c.due.addPage(p1)
	c.due.addPage(p2)
	c.due.addFile(e)
	if n := len(s.events); n != 1 {
		t.Fatalf("%d hand-offs for three checks, want 1", n)
	}
	<-s.events
	pages, files := c.takeDue()
	if !slices.Equal(pages, []*Page{p1, p2}) || !slices.Equal(files, []*openFile{e}) {
		t.Fatalf("took %v %v", pages, files)
	}
	c.due.addPage(p3)
	if n := len(s.events); n != 1 {
		t.Fatalf("%d hand-offs after a take, want 1", n)
	}
	<-s.events
	c.takeDue()
	s.full.Store(true)
	c.due.addPage(p1)
	c.due.addPage(p2) // the refused hand-off kept p1: this one tries again
	if handed, lost, _, _ := c.due.counts(); handed != 2 || lost != 0 {
		t.Fatalf("handed %d, lost %d; want 2, 0", handed, lost)
	}
	s.full.Store(false)
	c.due.addPage(p3)
	<-s.events
	if pages, _ := c.takeDue(); !slices.Equal(pages, []*Page{p1, p2, p3}) {
		t.Fatalf("took %v after refusals, want the three", pages)
	}
}

// TestDueChecksWindow: with a window, checks are handed over once it has
// passed (a hang guard only, no timing threshold), in one hand-off.
func TestDueChecksWindow(t *testing.T) {
	s := &eventSink{events: make(chan sink.Event, 16)}
	var d dueChecks
	d.init(s, 2*time.Second)
	if d.window != maxDueWindow {
		t.Fatalf("window %v, want %v", d.window, maxDueWindow)
	}
	d.addPage(&Page{Key: "/1"})
	d.addPage(&Page{Key: "/2"})
	select {
	case <-s.events:
	case <-time.After(10 * time.Second):
		t.Fatal("no hand-off")
	}
	if pages, _ := d.take(); len(pages) != 2 {
		t.Fatalf("took %d pages, want 2", len(pages))
	}
	if n := len(s.events); n != 0 {
		t.Fatalf("%d more hand-offs", n)
	}
}

// TestDueChecksResentWhenUntaken: a checkDue that CacheMiss accepted but
// never took (a batch that panicked before it, a discarded queue) holds
// the next checks back only for the resend period: then the next due
// check sends another, and CacheMiss takes every check waiting. On a
// fake clock.
func TestDueChecksResentWhenUntaken(t *testing.T) {
	s := &eventSink{events: make(chan sink.Event, 16)}
	c := dueCache(t, s, 0) // no window: handed over at once
	var clock int64 = 1
	c.due.now = func() int64 { return clock }
	c.due.addPage(cachePage(c, "/1"))
	<-s.events // accepted, never taken
	clock += c.due.resend - 1
	c.due.addPage(cachePage(c, "/2"))
	if n := len(s.events); n != 0 {
		t.Fatalf("%d hand-offs while the first is fresh, want 0", n)
	}
	clock++
	c.due.addPage(cachePage(c, "/3"))
	if n := len(s.events); n != 1 {
		t.Fatalf("%d hand-offs once the first looks lost, want 1", n)
	}
	if pages, _ := c.takeDue(); len(pages) != 3 {
		t.Fatalf("took %d pages, want the 3 waiting", len(pages))
	}
	if handed, lost, checks, _ := c.due.counts(); handed != 2 || lost != 0 || checks != 3 {
		t.Fatalf("handed %d, lost %d, checks %d; want 2, 0, 3", handed, lost, checks)
	}
}

// TestDueChecksStop: once the page cache is destroyed, the checks
// waiting and every later one are dropped and counted lost, with no
// hand-off (and the window's timer stopped).
func TestDueChecksStop(t *testing.T) {
	s := &eventSink{events: make(chan sink.Event, 16)}
	var d dueChecks
	d.init(s, time.Hour) // a window of maxDueWindow
	d.addPage(&Page{Key: "/1"})
	d.stop()
	d.addPage(&Page{Key: "/2"})
	d.addFile(&openFile{key: "/f"})
	if handed, lost, checks, _ := d.counts(); handed != 0 || lost != 3 || checks != 0 {
		t.Fatalf("handed %d, lost %d, checks %d; want 0, 3, 0", handed, lost, checks)
	}
	select {
	case <-s.events:
		t.Fatal("a hand-off after stop")
	case <-time.After(5 * maxDueWindow): // the stopped timer's window, passed
	}
}

// TestDueChecksKeptWhenRefused: the checks of a hand-off CacheMiss
// refuses wait for the next one, the one a later due check makes
// (without a window) or the window's timer again (with one: no later
// check needed; a hang guard only); past the bound (maxKept) a check
// is dropped and counted lost. With a window, the hand-offs wait at a
// gate until the three pages are added, so that how long adding them
// takes does not matter.
func TestDueChecksKeptWhenRefused(t *testing.T) {
	tests := []struct {
		name      string
		period    time.Duration // 0: no window
		maxKept   int           // 0: maxDueChecks
		refusals  int           // hand-offs refused
		addFile   bool          // a file comes due after the pages (three)
		took      int           // pages taken
		tookFiles int
		lost      uint64
	}{
		{name: "no window", refusals: 3, addFile: true, took: 3, tookFiles: 1},
		{name: "no window, bounded", maxKept: 2, refusals: 3, addFile: true, took: 2, lost: 2}, // the third page, the file
		{name: "window", period: 2 * time.Second, refusals: 1, took: 3},                        // retried by the timer
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &eventSink{events: make(chan sink.Event, 16)}
			if tt.period > 0 {
				s.gate = make(chan struct{})
			}
			var d dueChecks
			d.init(s, tt.period)
			if tt.maxKept > 0 {
				d.maxKept = tt.maxKept
			}
			s.refusals.Store(int64(tt.refusals))
			for i := range 3 {
				d.addPage(&Page{Key: string(rune('a' + i))})
			}
			if tt.addFile {
				d.addFile(&openFile{key: "/f"})
			}
			if s.gate != nil {
				close(s.gate)
			}
			select {
			case <-s.events:
			case <-time.After(10 * time.Second):
				t.Fatal("the checks kept never handed over")
			}
			pages, files := d.take()
			if len(pages) != tt.took || len(files) != tt.tookFiles {
				t.Fatalf("took %d pages, %d files; want %d, %d", len(pages), len(files), tt.took, tt.tookFiles)
			}
			for i, key := range pages {
				if key != string(rune('a'+i)) {
					t.Fatalf("page %d is %q: not the first kept, in order", i, key)
				}
			}
			if _, lost, _, _ := d.counts(); lost != tt.lost {
				t.Fatalf("lost %d, want %d", lost, tt.lost)
			}
		})
	}
}

// TestDueChecksQueuedOnce: a page or file claimed again while its check
// waits (CacheMiss refusing hand-offs for longer than a period) waits
// once: it takes no more room (no other check is lost for it) and is
// checked once when CacheMiss takes them; once taken, its next claim
// adds it again.
func TestDueChecksQueuedOnce(t *testing.T) {
	s := &eventSink{events: make(chan sink.Event, 16)}
	c := dueCache(t, s, 0) // no window: handed over at once
	c.due.maxKept = 3
	hot, other := cachePage(c, "/hot"), cachePage(c, "/other")
	e := cacheFile(t, c, "/f")
	s.full.Store(true)
	for range 5 { // five periods of refusals
		c.due.addPage(hot)
		c.due.addFile(e)
	}
	c.due.addPage(other)
	if _, lost, _, _ := c.due.counts(); lost != 0 {
		t.Fatalf("%d checks lost, want 0 (three waiting of three)", lost)
	}
	s.full.Store(false)
	c.due.addPage(hot) // claimed again: the hand-off is retried
	<-s.events
	pages, files := c.takeDue()
	if !slices.Equal(pages, []*Page{hot, other}) || !slices.Equal(files, []*openFile{e}) {
		t.Fatalf("took %v %v, want each once", pages, files)
	}
	c.due.addPage(hot)
	<-s.events
	if pages, _ := c.takeDue(); !slices.Equal(pages, []*Page{hot}) {
		t.Fatalf("took %v after the take, want the hot page again", pages)
	}
	if _, lost, checks, gone := c.due.counts(); lost != 0 || checks != 4 || gone != 0 {
		t.Fatalf("lost %d, checks %d, gone %d; want 0, 4, 0", lost, checks, gone)
	}
}

// TestDueChecksSkipGone: a page or file that left the cache while its
// check waited (evicted, removed, replaced by a newer one) is not
// checked, counted gone, and is not kept reachable by the checks
// waiting (its body with it); a newer page claimed in turn is checked
// once.
func TestDueChecksSkipGone(t *testing.T) {
	tests := []struct {
		name  string
		leave func(c *PageCache) // the page "/p" and the file "/f" leave
		took  int                // pages taken
		gone  uint64
	}{
		{"removed", func(c *PageCache) { c.Remove("/p"); c.files.remove("/f") }, 0, 2},
		{"replaced", func(c *PageCache) { cachePage(c, "/p"); cacheFile(t, c, "/f") }, 0, 2},
		{"replaced, claimed again", func(c *PageCache) { c.due.addPage(cachePage(c, "/p")); c.files.remove("/f") }, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &eventSink{events: make(chan sink.Event, 16)}
			c := dueCache(t, s, 0) // no window: handed over at once
			s.full.Store(true)
			collected := make(chan struct{})
			func() {
				p := cachePage(c, "/p")
				runtime.AddCleanup(p, func(ch chan struct{}) { close(ch) }, collected)
				c.due.addPage(p)
				c.due.addFile(cacheFile(t, c, "/f"))
			}()
			tt.leave(c)
			for deadline := time.Now().Add(10 * time.Second); ; {
				runtime.GC()
				select {
				case <-collected:
				case <-time.After(time.Millisecond):
					if time.Now().After(deadline) {
						t.Fatal("the page that left the cache is kept reachable")
					}
					continue
				}
				break
			}
			s.full.Store(false)
			c.due.addPage(cachePage(c, "/q"))
			<-s.events
			pages, files := c.takeDue()
			if len(pages) != tt.took+1 || pages[len(pages)-1].Key != "/q" || len(files) != 0 {
				t.Fatalf("took %v %v; want %d page(s) of /p, then /q, no file", pages, files, tt.took)
			}
			if _, _, checks, gone := c.due.counts(); checks != uint64(tt.took+1) || gone != tt.gone {
				t.Fatalf("checks %d, gone %d; want %d, %d", checks, gone, tt.took+1, tt.gone)
			}
		})
	}
}
