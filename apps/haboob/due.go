package haboob

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// maxDueWindow bounds how long a due check waits for others to join it.
const maxDueWindow = 20 * time.Millisecond

// maxDueChecks bounds the checks waiting for CacheMiss (256 KiB of
// keys, each sharing its page's or file's): a check that comes due past
// it is dropped, counted lost (its page or file is claimed again in a
// later period), so that a CacheMiss refusing hand-offs for long cannot
// make them grow without end. A window gathers a few hundred at most.
const maxDueChecks = 16384

// checkDue tells CacheMiss that checks are waiting in the page cache's
// dueChecks: it takes and makes them all.
type checkDue struct{}

// dueChecks gathers the cached pages and open files whose check is due
// (claimed by one request each per period, see revalidateDue and
// lookupOpenFile) for CacheMiss, so that one hand-off and one wake-up of
// a CacheMiss thread make all the checks that came due within a window
// (a fraction of the period, at most maxDueWindow) instead of one each:
// at 1024 connections on a file set of thousands of cached files, a
// check comes due every few hundred microseconds.
//
// A page or file waits at most once (its queued flag, set when it is
// added and cleared when CacheMiss takes it): claimed again while
// CacheMiss refuses hand-offs for longer than a period, it is not added
// twice. What waits is its key, not the page or file, so that one
// evicted meanwhile is not kept (nor its body); CacheMiss takes only
// those still cached (PageCache.takeDue).
type dueChecks struct {
	miss   sink.Sink     // CacheMiss
	window time.Duration // 0: handed over at once
	// resend is how long a checkDue handed over may stay untaken before
	// the next due check sends another: CacheMiss may never handle one
	// it accepted (a batch that panicked before it, a discarded queue),
	// and the checks must not stop for good.
	resend int64
	now    func() int64 // sink.Nanotime (tests set a fake clock)
	// maxKept bounds the checks waiting (maxDueChecks; tests set fewer).
	maxKept int

	mu          sync.Mutex
	pages       []string // the keys of the pages waiting
	files       []string // and of the open files
	scheduled   bool     // a checkDue is on its way (or its timer runs)
	scheduledAt int64    // when
	timer       *time.Timer
	stopped     bool // the page cache is destroyed: checks are dropped
	// handed counts the checkDue events handed to CacheMiss, lost the
	// checks dropped past maxKept (each is claimed again in a later
	// period) or because the page cache stopped, checks those taken by
	// CacheMiss and made, gone those taken whose page or file had left
	// the cache (nothing left to check).
	handed, lost, checks, gone uint64
}

// init sets where the checks go and the window, a quarter of period
// up to maxDueWindow.
func (d *dueChecks) init(miss sink.Sink, period time.Duration) {
	d.miss = miss
	d.window = min(period/4, maxDueWindow)
	d.resend = int64(max(period, time.Second))
	d.now = sink.Nanotime
	d.maxKept = maxDueChecks
}

func (d *dueChecks) addPage(p *Page) { d.add(&d.pages, p.Key, &p.queued) }

func (d *dueChecks) addFile(e *openFile) { d.add(&d.files, e.key, &e.queued) }

// add appends key to keys (d.pages or d.files) unless its page or file
// waits already (queued), and has the checks handed over: a check
// claimed while its page waits is made by the one waiting.
func (d *dueChecks) add(keys *[]string, key string, queued *atomic.Bool) {
	first := queued.CompareAndSwap(false, true)
	d.mu.Lock()
	if first {
		if d.roomLocked() {
			*keys = append(*keys, key)
		} else {
			queued.Store(false) // lost: claimed again in a later period
		}
	}
	d.scheduleLocked()
}

// roomLocked reports whether one more check may wait (fewer than maxKept
// do; before init, any number), else counts it lost.
func (d *dueChecks) roomLocked() bool {
	if d.maxKept <= 0 || len(d.pages)+len(d.files) < d.maxKept {
		return true
	}
	d.lost++
	return false
}

// scheduleLocked has the checks handed over after the window unless that
// is done already (and not so long ago that it looks lost), and unlocks
// d.
func (d *dueChecks) scheduleLocked() {
	if d.stopped {
		d.lost += uint64(len(d.pages) + len(d.files))
		d.pages, d.files = nil, nil
		d.mu.Unlock()
		return
	}
	now := d.clock()
	if d.scheduled && (d.resend == 0 || now-d.scheduledAt < d.resend) {
		d.mu.Unlock()
		return
	}
	d.scheduled, d.scheduledAt = true, now
	if d.window <= 0 {
		d.mu.Unlock()
		d.post()
		return
	}
	d.armLocked()
	d.mu.Unlock()
}

// armLocked starts (or restarts) the window's timer.
func (d *dueChecks) armLocked() {
	if d.timer == nil {
		d.timer = time.AfterFunc(d.window, d.post)
	} else {
		d.timer.Reset(d.window)
	}
}

// post hands CacheMiss a checkDue. If it refuses it, the checks waiting
// stay for the next hand-off: after another window (the timer is armed
// again), or without a window the one the next due check makes.
func (d *dueChecks) post() {
	if d.miss != nil && d.miss.EnqueueLossy(checkDue{}) {
		d.mu.Lock()
		d.handed++
		d.mu.Unlock()
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.scheduled = false
	if d.window > 0 && !d.stopped && len(d.pages)+len(d.files) > 0 {
		d.scheduled, d.scheduledAt = true, d.clock()
		d.armLocked()
	}
}

// dropLocked drops the checks waiting, counted lost.
func (d *dueChecks) dropLocked() {
	d.lost += uint64(len(d.pages) + len(d.files))
	d.pages, d.files = nil, nil
}

// take returns the keys of the pages and files waiting and lets the
// next check schedule a hand-over.
func (d *dueChecks) take() (pages, files []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pages, files = d.pages, d.files
	d.pages, d.files, d.scheduled = nil, nil, false
	return pages, files
}

// made counts checks taken and made, and gone those whose page or file
// had left the cache.
func (d *dueChecks) made(checks, gone int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checks += uint64(checks)
	d.gone += uint64(gone)
}

// takeDue returns the cached pages and open files whose checks were
// waiting (see dueChecks), each no longer queued, so that its next claim
// adds it again. A key whose page or file has left the cache since
// (evicted, removed, or replaced by one not waiting) is skipped, counted
// gone.
func (c *PageCache) takeDue() ([]*Page, []*openFile) {
	pageKeys, fileKeys := c.due.take()
	var pages []*Page
	c.mu.Lock()
	for _, key := range pageKeys {
		if p, ok := c.pages[key]; ok && p.queued.CompareAndSwap(true, false) {
			pages = append(pages, p)
		}
	}
	c.mu.Unlock()
	files := c.files.takeQueued(fileKeys)
	taken := len(pages) + len(files)
	c.due.made(taken, len(pageKeys)+len(fileKeys)-taken)
	return pages, files
}

// takeQueued returns the entries of keys that wait for a check (see
// dueChecks), each no longer queued; a key whose entry left is skipped.
func (c *openFiles) takeQueued(keys []string) []*openFile {
	var files []*openFile
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, key := range keys {
		if e, ok := c.m[key]; ok && e.queued.CompareAndSwap(true, false) {
			files = append(files, e)
		}
	}
	return files
}

// stop stops the timer and drops the checks waiting and every later one,
// counted lost (the page cache is destroyed).
func (d *dueChecks) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.stopped = true
	d.dropLocked()
}

// clock is d.now, or sink.Nanotime before init.
func (d *dueChecks) clock() int64 {
	if d.now == nil {
		return sink.Nanotime()
	}
	return d.now()
}

// counts returns handed, lost, checks and gone.
func (d *dueChecks) counts() (handed, lost, checks, gone uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.handed, d.lost, d.checks, d.gone
}
