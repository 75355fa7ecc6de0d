package haboob

import (
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// maxDueWindow bounds how long a due check waits for others to join it.
const maxDueWindow = 20 * time.Millisecond

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
type dueChecks struct {
	miss   sink.Sink     // CacheMiss
	window time.Duration // 0: handed over at once

	mu        sync.Mutex
	pages     []*Page
	files     []*openFile
	scheduled bool // a checkDue is on its way (or its timer runs)
	// handed counts the checkDue events handed to CacheMiss, lost the
	// checks dropped because CacheMiss refused one (each is claimed
	// again in a later period).
	// checks counts those taken by CacheMiss.
	handed, lost, checks uint64
}

// init sets where the checks go and the window, a quarter of period
// up to maxDueWindow.
func (d *dueChecks) init(miss sink.Sink, period time.Duration) {
	d.miss = miss
	d.window = min(period/4, maxDueWindow)
}

func (d *dueChecks) addPage(p *Page) {
	d.mu.Lock()
	d.pages = append(d.pages, p)
	d.scheduleLocked()
}

func (d *dueChecks) addFile(e *openFile) {
	d.mu.Lock()
	d.files = append(d.files, e)
	d.scheduleLocked()
}

// scheduleLocked has the checks handed over after the window unless that
// is done already, and unlocks d.
func (d *dueChecks) scheduleLocked() {
	if d.scheduled {
		d.mu.Unlock()
		return
	}
	d.scheduled = true
	d.mu.Unlock()
	if d.window <= 0 {
		d.post()
		return
	}
	time.AfterFunc(d.window, d.post)
}

// post hands CacheMiss a checkDue; if it refuses it, the checks waiting
// are dropped (lossy, as a refused check always was).
func (d *dueChecks) post() {
	if d.miss != nil && d.miss.EnqueueLossy(checkDue{}) {
		d.mu.Lock()
		d.handed++
		d.mu.Unlock()
		return
	}
	pages, files := d.take()
	d.mu.Lock()
	d.lost += uint64(len(pages) + len(files))
	d.mu.Unlock()
}

// take returns the checks waiting and lets the next one schedule a
// hand-over.
func (d *dueChecks) take() ([]*Page, []*openFile) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pages, files := d.pages, d.files
	d.checks += uint64(len(pages) + len(files))
	d.pages, d.files, d.scheduled = nil, nil, false
	return pages, files
}

// counts returns handed, lost and checks.
func (d *dueChecks) counts() (handed, lost, checks uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.handed, d.lost, d.checks
}
