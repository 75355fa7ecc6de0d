package haboob

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxDirChecks bounds the directories whose checks a Site keeps. Past
// it, a new directory takes the room of the entries no revalidation used
// for one and a half revalidation periods, or else is checked without sharing (see
// dirChecks.roomLocked): the directories kept stay shared.
const maxDirChecks = 8192

// dirChecks are the checks of the directories below a Site's root that a
// revalidation (Site.recheck, recheckSibling) may reuse for a while
// instead of making them again for every file under them: that a
// directory is a directory and not a symbolic link (lstat), and whether
// it holds any file named *.gz (one listing). A cached page or open file
// is checked once a revalidation period; its directory's checks are made
// at most once per reuse period (half of it), shared by all the files
// under it, so a directory swapped for a link is seen within one and a
// half periods. Its listing is reused for the whole period, and after
// that for as long as an lstat finds its change time unchanged (and
// settled): a .gz file added is seen within two periods, even if the
// directory's modification time is then set back (touch -r, rsync -t).
// Up to maxDirChecks directories are kept (see roomLocked).
//
// Only revalidations reuse them: a miss (Site.Resolve) lstats every
// component, so no byte from outside the root is ever read, whatever the
// checks say; a revalidation that reuses an old check at worst keeps a
// page read from inside the root a little longer.
type dirChecks struct {
	period int64 // how long a check is reused (ns); ≤ 0: never

	now     func() int64                           // sink.Nanotime
	wall    func() time.Time                       // time.Now
	lstat   func(string) (fs.FileInfo, error)      // os.Lstat
	hasName func(dir, suffix string) (bool, error) // hasName

	mu    sync.Mutex
	m     map[string]dirCheck
	limit int // the most directories m holds (maxDirChecks; tests set fewer)
	// lookedAt is when m, full, was last looked through for entries to
	// evict (Nanotime).
	lookedAt int64

	// lstats and listings count the system checks made by revalidations
	// (one lstat per component, one listing per directory), reused the
	// components whose lstat a check spared, unshared the checks made
	// without an entry because m was full (a directory's lstat or its
	// sibling's instead of a listing).
	lstats, listings, reused, unshared atomic.Uint64
}

// dirCheck is what is known of a directory and since when (Nanotime; 0:
// not known).
type dirCheck struct {
	isDir  int64 // lstat said a directory, not a link
	listed int64 // listed (or found unchanged since); noGz: no name in it ends in .gz
	noGz   bool
	// changed is the directory's change time (see changeTime) before its
	// listing, made at wall-clock time listedAt.
	changed, listedAt time.Time
}

// settledAge is how much older than its listing a directory's change
// time must be for an unchanged one to mean unchanged names: a name
// added or removed after the listing sets the time to that moment or
// later (the kernel's timestamps lag the clock by a tick, far less than
// this), so a time this much older cannot equal it. The change time
// (ctime), not the modification time, because no call sets it back: a
// .gz file added and the directory's modification time restored (touch
// -r, rsync -t) leave the modification time as it was, not the change
// time.
const settledAge = time.Second

func newDirChecks(now func() int64) *dirChecks {
	return &dirChecks{now: now, wall: time.Now, lstat: os.Lstat, hasName: hasName, m: map[string]dirCheck{}, limit: maxDirChecks}
}

// hasName reports whether a name in dir ends in suffix, reading the
// directory a few hundred names at a time up to the first that does.
func hasName(dir, suffix string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if strings.HasSuffix(n, suffix) {
				return true, nil
			}
		}
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

func (d *dirChecks) fresh(at, now int64) bool {
	return d.period > 0 && at != 0 && now-at <= d.period
}

// isDir reports whether dir was found a directory (not a link) within
// the reuse period.
func (d *dirChecks) isDir(dir string, now int64) bool {
	if d.period <= 0 {
		return false
	}
	d.mu.Lock()
	c := d.m[dir]
	d.mu.Unlock()
	return d.fresh(c.isDir, now)
}

// update records a check of dir, unless dir has no entry and m has no
// room for one (counted unshared: dir's next check is made again).
func (d *dirChecks) update(dir string, f func(*dirCheck)) {
	if d.period <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.m[dir]
	if !ok && !d.roomLocked() {
		d.unshared.Add(1)
		return
	}
	f(&c)
	d.m[dir] = c
}

// evictAge is how long, in reuse periods, an entry no revalidation used
// stays in a full map: one and a half revalidation periods. A directory
// holding a single cached file is used once per revalidation period (two
// reuse periods) plus the time its check waits for a request and for
// CacheMiss (up to maxDueWindow, more when busy); evicting at two reuse
// periods would drop such an entry just before its next use.
const evictAge = 3

// roomLocked reports whether m has room for one more directory. When it
// is full, it evicts the entries that no revalidation used for evictAge
// reuse periods, looking through m at most once per reuse period, so
// that a site of more directories than the limit pays one such look per
// period rather than one per check; a directory it finds no room for is
// checked without sharing until then. The caller holds mu.
func (d *dirChecks) roomLocked() bool {
	if len(d.m) < d.limit {
		return true
	}
	now := d.now()
	if now-d.lookedAt < d.period {
		return false
	}
	d.lookedAt = now
	for dir, c := range d.m {
		if now-max(c.isDir, c.listed) > evictAge*d.period {
			delete(d.m, dir)
		}
	}
	return len(d.m) < d.limit
}

// noSibling reports whether dir has no name ending in ext (".gz"), by a
// listing made within twice the reuse period (the revalidation period),
// or an older one if an lstat of dir finds its change time unchanged and
// settled since (see settledAge); else dir is listed again. False when
// not known (the caller lstats the sibling), as when dir has no entry
// and there is no room for one (see roomLocked).
func (d *dirChecks) noSibling(dir, ext string, now int64) bool {
	if d.period <= 0 || ext != ".gz" {
		return false
	}
	d.mu.Lock()
	c, ok := d.m[dir]
	room := ok || d.roomLocked()
	d.mu.Unlock()
	if !room {
		d.unshared.Add(1)
		return false
	}
	if c.listed != 0 && now-c.listed <= 2*d.period {
		return c.noGz
	}
	d.lstats.Add(1)
	info, err := d.lstat(dir)
	if err != nil || !info.IsDir() {
		return false
	}
	changed := changeTime(info)
	if c.listed != 0 && changed.Equal(c.changed) && c.listedAt.Sub(changed) > settledAge {
		d.update(dir, func(c *dirCheck) { c.listed = now })
		return c.noGz
	}
	wall := d.wall()
	some, err := d.hasName(dir, ext)
	d.listings.Add(1)
	if err != nil {
		return false
	}
	none := !some
	d.update(dir, func(c *dirCheck) { c.listed, c.noGz, c.changed, c.listedAt = now, none, changed, wall })
	return none
}
