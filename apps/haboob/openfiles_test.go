package haboob

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
)

// openTemp creates a file of size bytes and opens it shared.
func openTemp(t *testing.T, dir, name string, size int) (*aio.SharedFile, os.FileInfo) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return aio.NewSharedFile(f), info
}

// The open-file cache hands out a reference per hit, drops entries that
// ran out of validity only when the file changed, evicts the least
// recently used beyond Max, and every file is closed exactly once, when
// the cache and every response have let go of it.
func TestOpenFilesReferences(t *testing.T) {
	dir := t.TempDir()
	c := newOpenFiles(openFileArgs{Max: 2, Valid: time.Second})
	const sec = int64(time.Second)
	fa, ia := openTemp(t, dir, "a", 10)
	fb, ib := openTemp(t, dir, "b", 20)
	fc, ic := openTemp(t, dir, "c", 30)

	a := c.put(&openFile{key: "/a", file: fa, info: ia, anyClient: true}, 0)
	if fa.Refs() != 2 {
		t.Fatalf("after put: %d references, want the cache's and the caller's", fa.Refs())
	}
	a.file.Release() // the reply is sent

	tests := []struct {
		name  string
		key   string
		gz    bool
		now   int64
		stale bool
		hit   bool
	}{
		{"valid", "/a", false, sec / 2, false, true},
		{"gzip client, no variant", "/a", true, sec / 2, false, true},
		{"expired", "/a", false, 2 * sec, false, false},
		{"expired, served while checked", "/a", false, 2 * sec, true, true},
		{"missing", "/nope", false, 0, true, false},
	}
	for _, tc := range tests {
		e, ok := c.lookup(tc.key, tc.gz, tc.now, tc.stale)
		if ok != tc.hit {
			t.Fatalf("%s: hit %v, want %v", tc.name, ok, tc.hit)
		}
		if ok {
			if fa.Refs() != 2 {
				t.Fatalf("%s: %d references during the reply", tc.name, fa.Refs())
			}
			e.file.Release()
		}
	}

	// One check per period is due.
	e, _ := c.get("/a", sec/2)
	e.file.Release()
	if c.due(e, sec/2) || !c.due(e, 2*sec) || c.due(e, 2*sec) {
		t.Fatal("due: not exactly one check once the validity ran out")
	}

	// Expired but unchanged: revalidated without reopening.
	if e, ok := c.revalidate("/a", ia, true, 5*sec); !ok || e.file != fa {
		t.Fatal("unchanged file not revalidated")
	} else {
		e.file.Release()
	}
	// Another file under the same key (changed): dropped, and closed.
	if _, ok := c.revalidate("/a", ib, true, 5*sec); ok {
		t.Fatal("a changed file revalidated")
	}
	if !fa.Closed() {
		t.Fatalf("dropped entry's file still open (%d references)", fa.Refs())
	}

	// Eviction: Max 2.
	c.put(&openFile{key: "/b", file: fb, info: ib}, 0).file.Release()
	c.put(&openFile{key: "/c", file: fc, info: ic}, 0).file.Release()
	if c.len() != 2 || fb.Closed() || fc.Closed() {
		t.Fatalf("%d entries; b closed %v, c closed %v", c.len(), fb.Closed(), fc.Closed())
	}
	held, _ := c.get("/b", 0) // a reply holds b while it is evicted
	fd, id := openTemp(t, dir, "d", 40)
	c.put(&openFile{key: "/d", file: fd, info: id}, 0).file.Release()
	if c.len() != 2 || fb.Closed() {
		t.Fatal("evicted file closed while a reply holds it")
	}
	held.file.Release()
	if !fb.Closed() && !fc.Closed() {
		t.Fatal("nothing closed after eviction")
	}
	c.purge()
	for name, f := range map[string]*aio.SharedFile{"b": fb, "c": fc, "d": fd} {
		if !f.Closed() {
			t.Errorf("%s open after purge (%d references)", name, f.Refs())
		}
	}
}
