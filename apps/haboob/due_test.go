package haboob

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// eventSink records what is enqueued, refusing everything when full
// and the next refusals events whatever.
type eventSink struct {
	sink.Sink
	events   chan sink.Event
	full     atomic.Bool
	refusals atomic.Int64
}

func (s *eventSink) EnqueueLossy(e sink.Event) bool {
	if s.full.Load() || s.refusals.Add(-1) >= 0 {
		return false
	}
	s.events <- e
	return true
}

// TestDueChecksCoalesced: the checks that come due before CacheMiss takes
// them share one hand-off; after a take the next one is handed over
// again; a hand-off CacheMiss refuses keeps its checks for the next
// one, and does not stop later hand-offs.
func TestDueChecksCoalesced(t *testing.T) {
	s := &eventSink{events: make(chan sink.Event, 16)}
	var d dueChecks
	d.init(s, 0) // no window: handed over at once
	p1, p2, p3 := &Page{Key: "/1"}, &Page{Key: "/2"}, &Page{Key: "/3"}
	e := &openFile{key: "/f"}
	d.addPage(p1)
	d.addPage(p2)
	d.addFile(e)
	if n := len(s.events); n != 1 {
		t.Fatalf("%d hand-offs for three checks, want 1", n)
	}
	<-s.events
	pages, files := d.take()
	if len(pages) != 2 || pages[0] != p1 || pages[1] != p2 || len(files) != 1 || files[0] != e {
		t.Fatalf("took %v %v", pages, files)
	}
	d.addPage(p3)
	if n := len(s.events); n != 1 {
		t.Fatalf("%d hand-offs after a take, want 1", n)
	}
	<-s.events
	d.take()
	s.full.Store(true)
	d.addPage(p1)
	d.addPage(p2) // the refused hand-off kept p1: this one tries again
	if handed, lost, _ := d.counts(); handed != 2 || lost != 0 {
		t.Fatalf("handed %d, lost %d; want 2, 0", handed, lost)
	}
	s.full.Store(false)
	d.addPage(p3)
	<-s.events
	if pages, _ := d.take(); len(pages) != 3 || pages[0] != p1 || pages[2] != p3 {
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
	var d dueChecks
	d.init(s, 0) // no window: handed over at once
	var clock int64 = 1
	d.now = func() int64 { return clock }
	d.addPage(&Page{Key: "/1"})
	<-s.events // accepted, never taken
	clock += d.resend - 1
	d.addPage(&Page{Key: "/2"})
	if n := len(s.events); n != 0 {
		t.Fatalf("%d hand-offs while the first is fresh, want 0", n)
	}
	clock++
	d.addPage(&Page{Key: "/3"})
	if n := len(s.events); n != 1 {
		t.Fatalf("%d hand-offs once the first looks lost, want 1", n)
	}
	if pages, _ := d.take(); len(pages) != 3 {
		t.Fatalf("took %d pages, want the 3 waiting", len(pages))
	}
	if handed, lost, checks := d.counts(); handed != 2 || lost != 0 || checks != 3 {
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
	if handed, lost, checks := d.counts(); handed != 0 || lost != 3 || checks != 0 {
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
// is dropped and counted lost.
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
			select {
			case <-s.events:
			case <-time.After(10 * time.Second):
				t.Fatal("the checks kept never handed over")
			}
			pages, files := d.take()
			if len(pages) != tt.took || len(files) != tt.tookFiles {
				t.Fatalf("took %d pages, %d files; want %d, %d", len(pages), len(files), tt.took, tt.tookFiles)
			}
			for i, p := range pages {
				if p.Key != string(rune('a'+i)) {
					t.Fatalf("page %d is %q: not the first kept, in order", i, p.Key)
				}
			}
			if _, lost, _ := d.counts(); lost != tt.lost {
				t.Fatalf("lost %d, want %d", lost, tt.lost)
			}
		})
	}
}
