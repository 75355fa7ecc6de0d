package haboob

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkedSite is a Site over a fresh root whose directory checks are
// reused for period, on a fake clock, with its lstats and listings
// counted per path.
type checkedSite struct {
	*Site
	root, outside string
	clock         int64
	lstats        map[string]int
	listings      map[string]int
}

func newCheckedSite(t *testing.T, period time.Duration) *checkedSite {
	t.Helper()
	cs := &checkedSite{root: t.TempDir(), outside: t.TempDir(), clock: 1, lstats: map[string]int{}, listings: map[string]int{}}
	for _, f := range []string{"dir/a", "dir/b", "dir/c", "other/x"} {
		mustWrite(t, filepath.Join(cs.root, f), f)
	}
	mustWrite(t, filepath.Join(cs.outside, "dir", "a"), "outside a")
	s, err := NewSite(SiteConfig{Root: cs.root})
	if err != nil {
		t.Fatal(err)
	}
	cs.Site = s
	cs.root = s.Root()
	s.checks.period = int64(period)
	s.checks.now = func() int64 { return cs.clock }
	s.checks.lstat = func(p string) (fs.FileInfo, error) {
		cs.lstats[p]++
		return os.Lstat(p)
	}
	s.checks.hasName = func(dir, suffix string) (bool, error) {
		cs.listings[dir]++
		return hasName(dir, suffix)
	}
	return cs
}

func mustWrite(t *testing.T, file, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRecheckSharesDirectoryChecks: revalidations of the files of one
// directory lstat it once per reuse period; a miss (Resolve) lstats it
// every time; after the period it is lstat'ed again; a reuse period of 0
// shares nothing.
func TestRecheckSharesDirectoryChecks(t *testing.T) {
	type step struct {
		resolve bool // Resolve (a miss) instead of recheck
		path    string
		advance time.Duration // clock moved before the step
		dir     int           // lstats of root/dir so far
		file    int           // lstats of the file so far
	}
	tests := []struct {
		name   string
		period time.Duration
		steps  []step
	}{
		{"shared within the period", time.Second, []step{
			{path: "/dir/a", dir: 1, file: 1},
			{path: "/dir/b", dir: 1, file: 1},
			{path: "/dir/c", advance: 999 * time.Millisecond, dir: 1, file: 1},
			{path: "/dir/a", dir: 1, file: 2},
			{path: "/dir/b", advance: 2 * time.Millisecond, dir: 2, file: 2}, // period over
			{path: "/dir/c", dir: 2, file: 2},
		}},
		{"a miss always lstats", time.Second, []step{
			{path: "/dir/a", dir: 1, file: 1},
			{resolve: true, path: "/dir/b", dir: 2, file: 1},
			{resolve: true, path: "/dir/b", dir: 3, file: 2},
			{path: "/dir/c", dir: 3, file: 1},
		}},
		{"no reuse period", 0, []step{
			{path: "/dir/a", dir: 1, file: 1},
			{path: "/dir/b", dir: 2, file: 1},
			{path: "/dir/a", dir: 3, file: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := newCheckedSite(t, tt.period)
			for i, st := range tt.steps {
				cs.clock += int64(st.advance)
				resolve := cs.recheck
				if st.resolve {
					resolve = cs.Resolve
				}
				tg, err := resolve(st.path)
				if err != nil || tg.File != filepath.Join(cs.root, st.path) {
					t.Fatalf("step %d %s: %+v, %v", i, st.path, tg, err)
				}
				if got := cs.lstats[filepath.Join(cs.root, "dir")]; got != st.dir {
					t.Errorf("step %d %s: directory lstat'ed %d times, want %d", i, st.path, got, st.dir)
				}
				if got := cs.lstats[tg.File]; got != st.file {
					t.Errorf("step %d %s: file lstat'ed %d times, want %d", i, st.path, got, st.file)
				}
			}
		})
	}
}

// TestRecheckSeesDirectorySwappedForLink: a directory swapped for a link
// out of the root is refused by a miss at once and by a revalidation once
// the directory's check is older than the reuse period; meanwhile a
// revalidation sees another file (not the page's), so the page is
// dropped, never kept as fresh.
func TestRecheckSeesDirectorySwappedForLink(t *testing.T) {
	cs := newCheckedSite(t, time.Second)
	before, err := cs.recheck("/dir/a")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cs.root, "dir")
	if err := os.Rename(dir, filepath.Join(cs.root, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(cs.outside, "dir"), dir); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Resolve("/dir/a"); !errors.Is(err, ErrOutsideRoot) {
		t.Fatalf("miss after the swap: %v, want ErrOutsideRoot", err)
	}
	cs.clock += int64(500 * time.Millisecond)
	if within, err := cs.recheck("/dir/a"); err == nil && ETag(within.Info) == ETag(before.Info) {
		t.Fatalf("revalidation within the period found the old file unchanged: %+v", within)
	}
	cs.clock += int64(501 * time.Millisecond)
	if _, err := cs.recheck("/dir/a"); !errors.Is(err, ErrOutsideRoot) {
		t.Fatalf("revalidation after the period: %v, want ErrOutsideRoot", err)
	}
}

// TestRecheckSiblingListing: a revalidation's .gz sibling lookup lists a
// directory once per revalidation period (twice the reuse period) and
// lstats no sibling in a directory without .gz files; a .gz file added is
// seen once the listing is older than that; a miss's Sibling always
// lstats.
func TestRecheckSiblingListing(t *testing.T) {
	cs := newCheckedSite(t, time.Second)
	dir := filepath.Join(cs.root, "dir")
	for _, p := range []string{"/dir/a", "/dir/b", "/dir/c"} {
		tg, err := cs.recheck(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cs.recheckSibling(tg, ".gz"); ok {
			t.Fatalf("%s: a sibling where there is none", p)
		}
		if got := cs.lstats[tg.File+".gz"]; got != 0 {
			t.Errorf("%s: sibling lstat'ed %d times, want 0", p, got)
		}
	}
	if got := cs.listings[dir]; got != 1 {
		t.Errorf("directory listed %d times, want 1", got)
	}
	mustWrite(t, filepath.Join(dir, "a.gz"), "gz")
	a, _ := cs.recheck("/dir/a")
	if _, ok := cs.recheckSibling(a, ".gz"); ok {
		t.Errorf("a .gz file seen within the period of the listing before it")
	}
	if _, ok := cs.Sibling(a, ".gz"); !ok {
		t.Errorf("Sibling (a miss) did not see the .gz file")
	}
	cs.clock += int64(2*time.Second + 1)
	if _, ok := cs.recheckSibling(a, ".gz"); !ok {
		t.Errorf("the .gz file not seen after the period")
	}
	if got := cs.listings[dir]; got != 2 {
		t.Errorf("directory listed %d times, want 2", got)
	}
	b, _ := cs.recheck("/dir/b")
	if _, ok := cs.recheckSibling(b, ".gz"); ok {
		t.Errorf("b has no sibling")
	}
	if got := cs.lstats[b.File+".gz"]; got != 1 {
		t.Errorf("in a directory with .gz files the sibling is lstat'ed: %d times, want 1", got)
	}
}

// TestRecheckSiblingUnchangedDirectory: once the revalidation period is
// over, a directory whose change time is unchanged since its listing and
// settled (older than the listing by settledAge) is not listed again,
// only lstat'ed; one changed just before its listing is listed again
// each period; one whose names changed is listed again and its .gz file
// seen, even if its modification time was set back (touch -r, rsync -t:
// the change time says it changed). Real files and timestamps; the
// listings are taken as made listedAfter the directory's last change.
func TestRecheckSiblingUnchangedDirectory(t *testing.T) {
	tests := []struct {
		name         string
		listedAfter  time.Duration
		addGz        bool // a .gz file added after the first listing
		restoreMtime bool // and the directory's modification time set back
		listings     int  // after four periods
		found        bool
	}{
		{name: "settled, unchanged", listedAfter: time.Hour, listings: 1},
		{name: "changed just before the listing", listedAfter: time.Millisecond, listings: 4},
		{name: "settled, then a .gz added", listedAfter: time.Hour, addGz: true, listings: 2, found: true},
		{name: "settled, then a .gz added, the mtime restored", listedAfter: time.Hour, addGz: true, restoreMtime: true, listings: 2, found: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := newCheckedSite(t, time.Second)
			dir := filepath.Join(cs.root, "dir")
			mtime := time.Now().Add(-time.Hour).Truncate(time.Second)
			if err := os.Chtimes(dir, mtime, mtime); err != nil {
				t.Fatal(err)
			}
			info, err := os.Lstat(dir)
			if err != nil {
				t.Fatal(err)
			}
			listedAt := changeTime(info).Add(tt.listedAfter)
			cs.checks.wall = func() time.Time { return listedAt }
			a, err := cs.recheck("/dir/a")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := cs.recheckSibling(a, ".gz"); ok {
				t.Fatal("a sibling where there is none")
			}
			if tt.addGz {
				changed := changeTime(info)
				waitForChangeTimePast(t, changed)
				mustWrite(t, filepath.Join(dir, "a.gz"), "gz")
				if tt.restoreMtime {
					if err := os.Chtimes(dir, mtime, mtime); err != nil {
						t.Fatal(err)
					}
					if info, err := os.Lstat(dir); err != nil || !info.ModTime().Equal(mtime) {
						t.Fatalf("the directory's modification time not restored: %v", err)
					}
				}
				if info, err := os.Lstat(dir); err != nil || !changeTime(info).After(changed) {
					t.Fatalf("the directory's change time did not move past %v: %v", changed, err)
				}
			}
			var found bool
			for range 3 {
				cs.clock += int64(2*time.Second + 1)
				_, found = cs.recheckSibling(a, ".gz")
			}
			if got := cs.listings[dir]; got != tt.listings {
				t.Errorf("listed %d times, want %d", got, tt.listings)
			}
			if found != tt.found {
				t.Errorf("sibling found %v, want %v", found, tt.found)
			}
		})
	}
}

// waitForChangeTimePast waits until the file system stamps a change
// later than t (a scratch file's, changed again and again; bounded by a
// hang guard), so that the next change of a directory gets a change
// time other than t: a change time has the kernel's coarse clock (a tick
// of 1 to 10 ms; before Linux 6.13 always, and later for an inode not
// stat'ed since its last change), so a change made within the same tick
// would get t again.
func waitForChangeTimePast(t *testing.T, past time.Time) {
	t.Helper()
	scratch := filepath.Join(t.TempDir(), "scratch")
	mustWrite(t, scratch, "")
	for deadline := time.Now().Add(10 * time.Second); ; {
		for _, mode := range []fs.FileMode{0o600, 0o644} {
			if err := os.Chmod(scratch, mode); err != nil {
				t.Fatal(err)
			}
		}
		info, err := os.Lstat(scratch)
		if err != nil {
			t.Fatal(err)
		}
		if changeTime(info).After(past) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no change time past %v in 10 s (the last %v)", past, changeTime(info))
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRevalidateDropsPageAfterSwap: CacheMiss's revalidation keeps an
// unchanged page (no copy, no read), drops a changed one, and drops one
// whose directory was swapped for a link out of the root.
func TestRevalidateDropsPageAfterSwap(t *testing.T) {
	cs := newCheckedSite(t, time.Second)
	cache := NewPageCache(1 << 20)
	h := &cacheMiss{site: cs.Site, cache: cache}
	insert := func(path string) *Page {
		tg, err := cs.Resolve(path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := os.ReadFile(tg.File)
		if err != nil {
			t.Fatal(err)
		}
		p := cache.Insert(path, body, "text/plain", Validators{ETag: ETag(tg.Info)})
		p.Release()
		return p
	}
	cached := func(path string) bool {
		p, ok := cache.get(path, false)
		if ok {
			p.Release()
		}
		return ok
	}
	a, b := insert("/dir/a"), insert("/other/x")
	h.revalidate(a)
	h.revalidate(b)
	if !cached("/dir/a") || !cached("/other/x") {
		t.Fatal("an unchanged page was dropped")
	}
	if st := cache.Stats(); st.Misses != 0 {
		t.Fatalf("revalidation looked pages up: %+v", st)
	}
	mustWrite(t, filepath.Join(cs.root, "other", "x"), "changed, longer")
	h.revalidate(b)
	if cached("/other/x") {
		t.Error("a changed page was kept")
	}
	dir := filepath.Join(cs.root, "dir")
	if err := os.Rename(dir, filepath.Join(cs.root, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(cs.outside, "dir"), dir); err != nil {
		t.Fatal(err)
	}
	h.revalidate(a) // within the directory check's period
	if cached("/dir/a") {
		t.Error("the page of a directory swapped for a link was kept")
	}
}

// BenchmarkRecheck is a revalidation's file-system check of one file (its
// path resolved again and its .gz sibling looked up) in a directory of 36
// files (a SPECweb99 directory), each checked once per period: "shared"
// reuses the directory's lstat and listing for the period (the clock
// moves so that they are made again every 36 checks), "none" makes them
// every time (main's way).
func BenchmarkRecheck(b *testing.B) {
	for _, bc := range []struct {
		name   string
		period time.Duration
	}{{"shared", time.Second}, {"none", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			root := b.TempDir()
			var paths []string
			for i := range 36 {
				p := filepath.Join("dir00001", "class"+string(rune('0'+i/9))+"_"+string(rune('0'+i%9)))
				if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644); err != nil {
					b.Fatal(err)
				}
				paths = append(paths, "/"+filepath.ToSlash(p))
			}
			s, err := NewSite(SiteConfig{Root: root})
			if err != nil {
				b.Fatal(err)
			}
			var clock int64 = 1
			s.checks.period = int64(bc.period)
			s.checks.now = func() int64 { return clock }
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				clock += int64(time.Second) / 36
				t, err := s.recheck(paths[i%len(paths)])
				if err != nil {
					b.Fatal(err)
				}
				s.recheckSibling(t, ".gz")
			}
		})
	}
}

// TestHasName: a name with the suffix is found wherever it is in the
// directory (past the first read of 256 names too); none, or an error
// for a directory that is not there.
func TestHasName(t *testing.T) {
	tests := []struct {
		name    string
		files   int    // plain files
		extra   string // one more file, "" for none
		want    bool
		missing bool
	}{
		{name: "empty", want: false},
		{name: "no .gz", files: 40, want: false},
		{name: "a .gz among many", files: 600, extra: "zz.gz", want: true},
		{name: "a name containing .gz", files: 3, extra: "a.gz.txt", want: false},
		{name: "no directory", missing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for i := range tt.files {
				mustWrite(t, filepath.Join(dir, fmt.Sprintf("f%04d", i)), "x")
			}
			if tt.extra != "" {
				mustWrite(t, filepath.Join(dir, tt.extra), "x")
			}
			if tt.missing {
				dir = filepath.Join(dir, "none")
			}
			got, err := hasName(dir, ".gz")
			if tt.missing != (err != nil) {
				t.Fatalf("error %v, want one: %v", err, tt.missing)
			}
			if got != tt.want {
				t.Errorf("hasName = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDirChecksFull: once the map holds its limit of directories, a new
// directory is checked without sharing (lstat'ed every revalidation, its
// sibling lstat'ed instead of a listing made) while the directories
// already in it stay shared; entries unused for one and a half
// revalidation periods (three reuse periods) are evicted to make room,
// once a reuse period has passed since the last look for them, and not
// one unused for a revalidation period and a little (a directory of one
// cached file, due again).
func TestDirChecksFull(t *testing.T) {
	cs := newCheckedSite(t, time.Second)
	cs.checks.limit = 2
	for _, d := range []string{"d0", "d1", "d2"} {
		mustWrite(t, filepath.Join(cs.root, d, "f"), d)
	}
	type step struct {
		path    string
		advance time.Duration // clock moved before the step
		sibling bool          // recheckSibling too
		lstats  [3]int        // of d0, d1, d2 so far
		lists   int           // listings of d2 so far
		entries int           // directories in the map after the step
	}
	steps := []step{
		{path: "/d0/f", lstats: [3]int{1, 0, 0}, entries: 1},
		{path: "/d1/f", lstats: [3]int{1, 1, 0}, entries: 2},
		{path: "/d2/f", sibling: true, lstats: [3]int{1, 1, 1}, entries: 2}, // full: d2 unshared, not listed
		{path: "/d0/f", lstats: [3]int{1, 1, 1}, entries: 2},                // d0, d1 still shared
		{path: "/d1/f", lstats: [3]int{1, 1, 1}, entries: 2},
		{path: "/d2/f", sibling: true, lstats: [3]int{1, 1, 2}, entries: 2},
		{path: "/d0/f", advance: 1500 * time.Millisecond, lstats: [3]int{2, 1, 2}, entries: 2}, // d0 checked again
		// d1, last used a revalidation period and a little ago (as a
		// directory of one cached file is), is not evicted before its use.
		{path: "/d2/f", advance: 600 * time.Millisecond, sibling: true, lstats: [3]int{2, 1, 3}, entries: 2},
		{path: "/d1/f", lstats: [3]int{2, 2, 3}, entries: 2},
		{path: "/d2/f", advance: 2500 * time.Millisecond, sibling: true, lstats: [3]int{2, 2, 5}, lists: 1, entries: 2}, // d0 stale (3.1 s): evicted
		{path: "/d2/f", sibling: true, lstats: [3]int{2, 2, 5}, lists: 1, entries: 2},
	}
	for i, st := range steps {
		cs.clock += int64(st.advance)
		tg, err := cs.recheck(st.path)
		if err != nil {
			t.Fatalf("step %d %s: %v", i, st.path, err)
		}
		if st.sibling {
			if _, ok := cs.recheckSibling(tg, ".gz"); ok {
				t.Fatalf("step %d %s: a sibling where there is none", i, st.path)
			}
		}
		var lstats [3]int
		for j, d := range []string{"d0", "d1", "d2"} {
			lstats[j] = cs.lstats[filepath.Join(cs.root, d)]
		}
		if lstats != st.lstats {
			t.Errorf("step %d %s: directories lstat'ed %v times, want %v", i, st.path, lstats, st.lstats)
		}
		if got := cs.listings[filepath.Join(cs.root, "d2")]; got != st.lists {
			t.Errorf("step %d %s: d2 listed %d times, want %d", i, st.path, got, st.lists)
		}
		if got := len(cs.checks.m); got != st.entries {
			t.Errorf("step %d %s: %d directories in the map, want %d", i, st.path, got, st.entries)
		}
	}
	if got := cs.lstats[filepath.Join(cs.root, "d2", "f.gz")]; got != 3 {
		t.Errorf("d2's sibling lstat'ed %d times while d2 was unshared, want 3", got)
	}
	if got := cs.checks.unshared.Load(); got != 6 {
		t.Errorf("%d checks unshared, want 6 (three lstats, three siblings)", got)
	}
}

// BenchmarkRecheckPastLimit is BenchmarkRecheck on a site of more
// directories than the map holds (96 of 36 files each, a limit of 64),
// every file checked once per period in a fixed shuffled order: it
// reports the directory lstats and listings per check (sibling lstats
// aside). The 64 directories kept stay shared, the other 32 are checked
// without sharing; clearing the whole map when full shared almost none.
func BenchmarkRecheckPastLimit(b *testing.B) {
	const dirs, files, limit = 96, 36, 64
	root := b.TempDir()
	var paths []string
	for d := range dirs {
		for f := range files {
			p := fmt.Sprintf("dir%05d/class%d_%d", d, f/9, f%9)
			if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
			paths = append(paths, "/"+p)
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(paths), func(i, j int) { paths[i], paths[j] = paths[j], paths[i] })
	s, err := NewSite(SiteConfig{Root: root})
	if err != nil {
		b.Fatal(err)
	}
	var clock int64 = 1
	s.checks.period = int64(time.Second)
	s.checks.limit = limit
	s.checks.now = func() int64 { return clock }
	var lstats, listings int
	s.checks.lstat = func(p string) (fs.FileInfo, error) {
		if strings.HasPrefix(filepath.Base(p), "dir") {
			lstats++ // a directory's, not a file's or a sibling's
		}
		return os.Lstat(p)
	}
	s.checks.hasName = func(dir, suffix string) (bool, error) {
		listings++
		return hasName(dir, suffix)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		clock += int64(time.Second) / int64(len(paths))
		t, err := s.recheck(paths[i%len(paths)])
		if err != nil {
			b.Fatal(err)
		}
		s.recheckSibling(t, ".gz")
	}
	b.ReportMetric(float64(lstats)/float64(b.N), "dirlstats/op")
	b.ReportMetric(float64(listings)/float64(b.N), "listings/op")
}
