package haboob

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
)

func site(t *testing.T) (*Site, string) {
	t.Helper()
	root := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "index.html"), []byte("<h1>home</h1>"), 0o644))
	must(os.MkdirAll(filepath.Join(root, "docs", "empty"), 0o755))
	must(os.WriteFile(filepath.Join(root, "docs", "index.htm"), []byte("docs"), 0o644))
	must(os.WriteFile(filepath.Join(root, "docs", "a b.txt"), []byte("spaced"), 0o644))
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	must(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "leak")))
	must(os.Symlink(outside, filepath.Join(root, "leakdir")))
	must(os.Symlink(filepath.Join(root, "docs", "a b.txt"), filepath.Join(root, "alias.txt")))
	s, err := NewSite(SiteConfig{Root: root})
	must(err)
	return s, root
}

func TestResolve(t *testing.T) {
	s, _ := site(t)
	tests := []struct {
		path     string
		file     string // base name expected
		redirect string
		err      error
	}{
		{path: "/", file: "index.html"},
		{path: "/index.html", file: "index.html"},
		{path: "/docs", redirect: "/docs/"},
		{path: "/docs/", file: "index.htm"},
		{path: "/docs/a b.txt", file: "a b.txt"},
		{path: "/docs/empty/", err: ErrNotFound},
		{path: "/docs/empty", redirect: "/docs/empty/"},
		{path: "/missing", err: ErrNotFound},
		{path: "/../etc/passwd", err: ErrNotFound}, // cleaned to /etc/passwd under the root
		{path: "/docs/../../index.html", file: "index.html"},
		{path: "/leak", err: ErrOutsideRoot},
		{path: "/leakdir/secret", err: ErrOutsideRoot},
		{path: "/alias.txt", file: "a b.txt"}, // a link inside the root is fine
		{path: "/nul\x00byte", err: ErrNotFound},
		{path: "relative", err: ErrNotFound},
	}
	for _, tt := range tests {
		got, err := s.Resolve(tt.path)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("Resolve(%q) err = %v, want %v", tt.path, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Resolve(%q): %v", tt.path, err)
			continue
		}
		if got.Redirect != tt.redirect || (tt.file != "" && filepath.Base(got.File) != tt.file) {
			t.Errorf("Resolve(%q) = %+v, want file %q redirect %q", tt.path, got, tt.file, tt.redirect)
		}
	}
}

// TestRealPath: a path without links below the root resolves to itself
// with its lstat (no second walk, no stat); one through a link inside or
// outside the root is left to EvalSymlinks (info nil), and Resolve then
// keeps the root's boundary; a missing component is an error.
func TestRealPath(t *testing.T) {
	s, _ := site(t)
	root := s.Root()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(root, "docs"), filepath.Join(root, "docslink")))
	tests := []struct {
		path     string
		real     string
		walked   bool // info from the walk's lstat
		notExist bool
	}{
		{path: "docs/a b.txt", real: "docs/a b.txt", walked: true},
		{path: "docs", real: "docs", walked: true},
		{path: "docs/empty", real: "docs/empty", walked: true},
		{path: "alias.txt", real: "docs/a b.txt"},
		{path: "docslink/index.htm", real: "docs/index.htm"},
		{path: "docs/missing", notExist: true},
		{path: "missing/a", notExist: true},
	}
	for _, tt := range tests {
		file := filepath.Join(root, tt.path)
		real, info, err := s.realPath(file, false)
		if tt.notExist {
			if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("realPath(%s) err = %v, want not exist", tt.path, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("realPath(%s): %v", tt.path, err)
			continue
		}
		if want := filepath.Join(root, tt.real); real != want {
			t.Errorf("realPath(%s) = %s, want %s", tt.path, real, want)
		}
		if (info != nil) != tt.walked {
			t.Errorf("realPath(%s): info %v, want from the walk: %v", tt.path, info, tt.walked)
		}
		if info != nil && filepath.Base(tt.real) != info.Name() {
			t.Errorf("realPath(%s): info of %s", tt.path, info.Name())
		}
	}
	if real, info, err := s.realPath(root, false); real != root || info != nil || err != nil {
		t.Errorf("realPath(root) = %s, %v, %v", real, info, err)
	}
}

// TestSibling: a .gz sibling is found beside a resolved file, through a
// link inside the root too, never through one leading out of it, and a
// directory is no sibling.
func TestSibling(t *testing.T) {
	s, root := site(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "docs", "a b.txt.gz"), []byte("gz"), 0o644))
	must(os.Symlink(filepath.Join(root, "docs", "a b.txt.gz"), filepath.Join(root, "index.html.gz")))
	must(os.Symlink(filepath.Join(root, "leak"), filepath.Join(root, "docs", "index.htm.gz")))
	must(os.Mkdir(filepath.Join(root, "docs", "empty.gz"), 0o755))
	tests := []struct {
		path string
		want string // "" no sibling
	}{
		{"/docs/a b.txt", "docs/a b.txt.gz"},
		{"/index.html", "docs/a b.txt.gz"},
		{"/docs/", ""}, // index.htm.gz leads out of the root
		{"/alias.txt", "docs/a b.txt.gz"},
	}
	for _, tt := range tests {
		tg, err := s.Resolve(tt.path)
		if err != nil {
			t.Fatalf("Resolve(%s): %v", tt.path, err)
		}
		sib, ok := s.Sibling(tg, ".gz")
		if got := ""; ok {
			got, _ = filepath.Rel(root, sib.File)
			if got != tt.want {
				t.Errorf("Sibling(%s) = %s, want %q", tt.path, got, tt.want)
			}
		} else if tt.want != "" {
			t.Errorf("Sibling(%s): none, want %s", tt.path, tt.want)
		}
	}
	if _, ok := s.Sibling(Target{File: filepath.Join(root, "docs", "empty")}, ".gz"); ok {
		t.Error("a directory taken for a sibling")
	}
}

func req(t *testing.T, headers ...string) *http.Request {
	t.Helper()
	raw := "GET / HTTP/1.1\r\nHost: x\r\n"
	for i := 0; i+1 < len(headers); i += 2 {
		raw += headers[i] + ": " + headers[i+1] + "\r\n"
	}
	var p http.Parser
	reqs, err := p.Feed(nil, []byte(raw+"\r\n"))
	if err != nil || len(reqs) != 1 {
		t.Fatalf("parse: %v %d", err, len(reqs))
	}
	return reqs[0]
}

func TestConditional(t *testing.T) {
	mod := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	v := Validators{ETag: `"abc"`, ModTime: mod}
	tests := []struct {
		headers []string
		want    bool
	}{
		{nil, false},
		{[]string{"If-None-Match", `"abc"`}, true},
		{[]string{"If-None-Match", `"x", W/"abc"`}, true},
		{[]string{"If-None-Match", `*`}, true},
		{[]string{"If-None-Match", `"other"`}, false},
		{[]string{"If-Modified-Since", mod.Format(http.TimeFormat)}, true},
		{[]string{"If-Modified-Since", mod.Add(-time.Hour).Format(http.TimeFormat)}, false},
		{[]string{"If-Modified-Since", "garbage"}, false},
		// A date later than the server's clock is ignored (RFC 9110 §13.1.3).
		{[]string{"If-Modified-Since", "Fri, 01 Jan 2100 00:00:00 GMT"}, false},
		{[]string{"If-Modified-Since", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}, false},
		// The obsolete formats are accepted.
		{[]string{"If-Modified-Since", mod.Format("Monday, 02-Jan-06 15:04:05 GMT")}, true},
		{[]string{"If-Modified-Since", mod.Format(time.ANSIC)}, true},
		{[]string{"If-Modified-Since", mod.Add(-time.Hour).Format(time.ANSIC)}, false},
		// If-None-Match wins over If-Modified-Since
		{[]string{"If-None-Match", `"other"`, "If-Modified-Since", mod.Format(http.TimeFormat)}, false},
	}
	for _, tt := range tests {
		if got := NotModified(req(t, tt.headers...), v); got != tt.want {
			t.Errorf("NotModified(%v) = %v, want %v", tt.headers, got, tt.want)
		}
	}
}

func TestParseRange(t *testing.T) {
	v := Validators{ETag: `"abc"`, ModTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	tests := []struct {
		headers []string
		want    ByteRange
		ok      bool
		err     error
	}{
		{nil, ByteRange{}, false, nil},
		{[]string{"Range", "bytes=0-9"}, ByteRange{0, 9}, true, nil},
		{[]string{"Range", "bytes=90-"}, ByteRange{90, 99}, true, nil},
		{[]string{"Range", "bytes=-10"}, ByteRange{90, 99}, true, nil},
		{[]string{"Range", "bytes=-500"}, ByteRange{0, 99}, true, nil},
		{[]string{"Range", "bytes=50-500"}, ByteRange{50, 99}, true, nil},
		{[]string{"Range", "bytes=100-"}, ByteRange{}, false, ErrUnsatisfiable},
		{[]string{"Range", "bytes=-0"}, ByteRange{}, false, ErrUnsatisfiable},
		{[]string{"Range", "bytes=5-1"}, ByteRange{}, false, nil},
		{[]string{"Range", "bytes=0-1,5-6"}, ByteRange{}, false, nil},
		{[]string{"Range", "items=0-1"}, ByteRange{}, false, nil},
		{[]string{"Range", "bytes=0-9", "If-Range", `"abc"`}, ByteRange{0, 9}, true, nil},
		{[]string{"Range", "bytes=0-9", "If-Range", `"old"`}, ByteRange{}, false, nil},
		{[]string{"Range", "bytes=0-9", "If-Range", v.ModTime.Format(http.TimeFormat)}, ByteRange{0, 9}, true, nil},
		{[]string{"Range", "bytes=0-9", "If-Range", v.ModTime.Add(time.Hour).Format(http.TimeFormat)}, ByteRange{}, false, nil},
	}
	for _, tt := range tests {
		got, ok, err := ParseRange(req(t, tt.headers...), 100, v)
		if got != tt.want || ok != tt.ok || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("ParseRange(%v) = %v %v %v, want %v %v %v", tt.headers, got, ok, err, tt.want, tt.ok, tt.err)
		}
	}
}

func TestContentType(t *testing.T) {
	for name, want := range map[string]string{
		"a.html": "text/html; charset=utf-8", "b.CSS": "text/css; charset=utf-8", "c.png": "image/png",
		"d.unknownext": "application/octet-stream", "e.js": "text/javascript; charset=utf-8",
	} {
		if got := ContentType(name); got != want {
			t.Errorf("ContentType(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestPageCacheLRUAndReuse(t *testing.T) {
	c := NewPageCache(100)
	put := func(key string, n int) *Page {
		b := c.Buffer(n)
		for i := range b {
			b[i] = key[0]
		}
		return c.Insert(key, b, "text/plain", Validators{})
	}
	put("a", 40).Release()
	put("b", 40).Release()
	if p, ok := c.Get("a"); !ok || p.Body[0] != 'a' {
		t.Fatal("a missing")
	} else {
		p.Release()
	}
	put("c", 40).Release() // evicts b, the least recently used
	if _, ok := c.Get("b"); ok {
		t.Fatal("b should be evicted")
	}
	st := c.Stats()
	if st.Pages != 2 || st.Bytes != 80 || st.Evictions != 1 {
		t.Fatalf("stats %+v", st)
	}
	// b's buffer (capacity 64) is reused for a page of the same class
	buf := c.Buffer(33)
	if c.Stats().Reused != 1 || cap(buf) != 64 {
		t.Fatalf("buffer not reused: cap %d stats %+v", cap(buf), c.Stats())
	}
	// a page still held by a reader is not recycled when evicted
	held, _ := c.Get("a")
	put("d", 40).Release()
	put("e", 40).Release() // evicts a (held) and c
	if _, ok := c.Get("a"); ok {
		t.Fatal("a should be evicted")
	}
	if held.Body[0] != 'a' {
		t.Fatal("held page changed")
	}
	before := c.Stats().Reused // c's buffer went to e
	_ = c.Buffer(40)           // nothing free until a is released
	if got := c.Stats().Reused - before; got != 0 {
		t.Fatalf("reused %d buffers, want 0 (a is still held)", got)
	}
	held.Release()
	_ = c.Buffer(40)
	if got := c.Stats().Reused - before; got != 1 {
		t.Fatalf("a's buffer not reused after release (%d)", got)
	}
	// a page bigger than the cache is served but not cached
	big := c.Insert("big", make([]byte, 200), "x", Validators{})
	if _, ok := c.Get("big"); ok || len(big.Body) != 200 {
		t.Fatal("oversized page cached")
	}
	big.Release()
}
