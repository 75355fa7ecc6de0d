package haboob_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/stage"
)

// testConfig is a small Haboob graph on a free port, without profiler,
// with knobs the tests need: a small cache object limit, a fast
// revalidation, and two dynamic stages (one that always admits, one that
// admits a single request).
const testConfig = `
global:
  shutdown: 5s
  threadpool: {min: 1, max: 2}
  aio:
    eventLoops: 1
    sockets:
      http: {addr: "127.0.0.1:0", lingerTimeout: 1m}
    file: {threadpool: {min: 1, max: 2}}
stages:
  HttpRecv:
    handler: haboob.HttpRecv
    args:
      routes: {/checksum/: Checksum, /busy/: Busy}
  PageCache:
    handler: haboob.PageCache
    args: {maxBytes: 1MiB, revalidate: 20ms}
  CacheMiss:
    handler: haboob.CacheMiss
    args: {maxObject: 4KiB}
  HttpSend:
    handler: haboob.HttpSend
  Checksum:
    handler: haboob.Checksum
    predicate: {type: rt, target: 1s, enabled: false}
    args: {work: 64KiB}
  Busy:
    handler: haboob.Checksum
    predicate: {type: all, of: [{type: rt, target: 1s, enabled: false}, {type: rate, rate: 0.001, depth: 1}]}
    args: {work: 1KiB, admission: false}
`

type site struct {
	hb   *haboob.Server
	m    *stage.Manager
	root string
	addr string
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

var bigFile = strings.Repeat("0123456789abcdef", 1024) // 16 KiB: above maxObject

func startHaboob(t testing.TB, config string) *site {
	t.Helper()
	root := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(root, "index.html"), "<h1>home</h1>")
	write(t, filepath.Join(root, "style.css"), "body{}")
	write(t, filepath.Join(root, "img", "dot.png"), "\x89PNG fake")
	write(t, filepath.Join(root, "docs", "index.html"), "docs home")
	write(t, filepath.Join(root, "page.txt"), "0123456789")
	write(t, filepath.Join(root, "big.bin"), bigFile)
	write(t, filepath.Join(root, "a b.txt"), "spaced")
	write(t, filepath.Join(outside, "secret"), "secret")
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "leak")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "leakdir")); err != nil {
		t.Fatal(err)
	}
	return startSite(t, config, haboob.Options{Root: root}, nil)
}

// startSite starts Haboob with opts on config, register adding the
// test's own handlers (nil: none), and shuts it down when the test ends.
func startSite(t testing.TB, config string, opts haboob.Options, register func(*stage.Registry)) *site {
	t.Helper()
	hb := haboob.New(opts)
	reg := stage.NewRegistry()
	hb.Register(reg)
	if register != nil {
		register(reg)
	}
	m, err := stage.Parse([]byte(config), reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		_ = hb.Close()
		t.Fatal(err)
	}
	s := &site{hb: hb, m: m, root: opts.Root, addr: hb.Addr().String()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hb.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("manager shutdown: %v", err)
		}
	})
	return s
}

func (s *site) client(t *testing.T) *nethttp.Client {
	tr := &nethttp.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &nethttp.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse }}
}

// do sends one request with headers and returns the response and body.
func (s *site) do(t *testing.T, c *nethttp.Client, method, path string, headers ...string) (*nethttp.Response, string) {
	t.Helper()
	req, err := nethttp.NewRequest(method, "http://"+s.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// raw sends a request line as is (net/http would clean the path) and
// returns the status.
func (s *site) raw(t testing.TB, target string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target)
	resp, err := nethttp.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestStaticServing(t *testing.T) {
	s := startHaboob(t, testConfig)
	c := s.client(t)
	tests := []struct {
		method, path string
		status       int
		body         string // "" means not checked
		header       [2]string
	}{
		{"GET", "/", 200, "<h1>home</h1>", [2]string{"Content-Type", "text/html; charset=utf-8"}},
		{"GET", "/index.html", 200, "<h1>home</h1>", [2]string{"Accept-Ranges", "bytes"}},
		{"GET", "/style.css", 200, "body{}", [2]string{"Content-Type", "text/css; charset=utf-8"}},
		{"GET", "/img/dot.png", 200, "\x89PNG fake", [2]string{"Content-Type", "image/png"}},
		{"GET", "/docs", 301, "", [2]string{"Location", "/docs/"}},
		{"GET", "/docs?x=1", 301, "", [2]string{"Location", "/docs/?x=1"}},
		{"GET", "/docs/", 200, "docs home", [2]string{"Server", "Haboob"}},
		{"GET", "/a%20b.txt", 200, "spaced", [2]string{"Content-Type", "text/plain; charset=utf-8"}},
		{"GET", "/missing", 404, "", [2]string{}},
		{"GET", "/leak", 403, "", [2]string{}},
		{"GET", "/leakdir/secret", 403, "", [2]string{}},
		{"GET", "/big.bin", 200, bigFile, [2]string{"Content-Length", strconv.Itoa(len(bigFile))}},
		{"HEAD", "/page.txt", 200, "", [2]string{"Content-Length", "10"}},
		{"POST", "/", 405, "", [2]string{"Allow", "GET, HEAD"}},
		{"DELETE", "/page.txt", 405, "", [2]string{}},
		{"PUT", "/page.txt", 405, "", [2]string{"Allow", "GET, HEAD"}},
		{"BREW", "/", 501, "", [2]string{}}, // unknown methods (RFC 9110 §9.1)
		{"PROPFIND", "/page.txt", 501, "", [2]string{}},
	}
	for range 2 { // cold (CacheMiss) and warm (PageCache)
		for _, tt := range tests {
			resp, body := s.do(t, c, tt.method, tt.path)
			if resp.StatusCode != tt.status {
				t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
				continue
			}
			if tt.body != "" && body != tt.body {
				t.Errorf("%s %s: body %q, want %q", tt.method, tt.path, body, tt.body)
			}
			if tt.method == "HEAD" && body != "" {
				t.Errorf("HEAD %s: body %q", tt.path, body)
			}
			if tt.header[0] != "" && resp.Header.Get(tt.header[0]) != tt.header[1] {
				t.Errorf("%s %s: %s = %q, want %q", tt.method, tt.path, tt.header[0], resp.Header.Get(tt.header[0]), tt.header[1])
			}
		}
	}
	st := s.hb.Cache().Stats()
	if st.Hits == 0 || st.Pages == 0 {
		t.Fatalf("cache not used: %+v", st)
	}
}

func TestTraversalAttempts(t *testing.T) {
	s := startHaboob(t, testConfig)
	for _, target := range []string{
		"/../secret", "/%2e%2e/secret", "/%2E%2E/%2e%2e/etc/passwd", "/docs/../../secret",
		"/..%2fsecret", "/%2e%2e%2fsecret", "/leak", "/leakdir/secret", "/leakdir/../leak",
		"/img/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
	} {
		status, body := s.raw(t, target)
		if status != 403 && status != 404 {
			t.Errorf("GET %s: status %d, want 403 or 404", target, status)
		}
		if strings.Contains(body, "secret") || strings.Contains(body, "root:") {
			t.Errorf("GET %s leaked %q", target, body)
		}
	}
}

func TestConditionalAndRange(t *testing.T) {
	s := startHaboob(t, testConfig)
	c := s.client(t)
	for _, path := range []string{"/page.txt", "/big.bin"} { // cached and uncached
		t.Run(path, func(t *testing.T) {
			resp, body := s.do(t, c, "GET", path)
			etag, mod := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
			if resp.StatusCode != 200 || etag == "" || mod == "" {
				t.Fatalf("validators missing: %d %v", resp.StatusCode, resp.Header)
			}
			size := len(body)
			tests := []struct {
				name    string
				method  string
				headers []string
				status  int
				body    string
				crange  string
			}{
				{"etag", "GET", []string{"If-None-Match", etag}, 304, "", ""},
				{"etag list", "GET", []string{"If-None-Match", `"nope", ` + etag}, 304, "", ""},
				{"other etag", "GET", []string{"If-None-Match", `"nope"`}, 200, body, ""},
				{"not modified since", "GET", []string{"If-Modified-Since", mod}, 304, "", ""},
				{"modified since", "GET", []string{"If-Modified-Since", "Mon, 02 Jan 2006 15:04:05 GMT"}, 200, body, ""},
				{"head 304", "HEAD", []string{"If-None-Match", etag}, 304, "", ""},
				{"range", "GET", []string{"Range", "bytes=2-5"}, 206, body[2:6], fmt.Sprintf("bytes 2-5/%d", size)},
				{"suffix range", "GET", []string{"Range", "bytes=-3"}, 206, body[size-3:], fmt.Sprintf("bytes %d-%d/%d", size-3, size-1, size)},
				{"open range", "GET", []string{"Range", "bytes=7-"}, 206, body[7:], fmt.Sprintf("bytes 7-%d/%d", size-1, size)},
				{"unsatisfiable", "GET", []string{"Range", "bytes=100000-"}, 416, "", fmt.Sprintf("bytes */%d", size)},
				{"if-range match", "GET", []string{"Range", "bytes=0-1", "If-Range", etag}, 206, body[:2], ""},
				{"if-range stale", "GET", []string{"Range", "bytes=0-1", "If-Range", `"old"`}, 200, body, ""},
				{"multiple ranges ignored", "GET", []string{"Range", "bytes=0-1,3-4"}, 200, body, ""},
				{"head ignores range", "HEAD", []string{"Range", "bytes=0-1"}, 200, "", ""},
			}
			for _, tt := range tests {
				resp, got := s.do(t, c, tt.method, path, tt.headers...)
				if resp.StatusCode != tt.status {
					t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.status)
					continue
				}
				if tt.status != 416 && got != tt.body {
					t.Errorf("%s: body %q, want %q", tt.name, got, tt.body)
				}
				if tt.crange != "" && resp.Header.Get("Content-Range") != tt.crange {
					t.Errorf("%s: Content-Range %q, want %q", tt.name, resp.Header.Get("Content-Range"), tt.crange)
				}
				if tt.status == 304 && resp.Header.Get("ETag") != etag {
					t.Errorf("%s: 304 without the ETag", tt.name)
				}
			}
		})
	}
	if st := s.hb.Cache().Stats(); st.Bytes > 4<<10 {
		t.Fatalf("a file above maxObject was cached: %+v", st)
	}
}

// largeConfig streams files above 4 KiB in 4 KiB pieces, and asyncFile
// refuses to read a whole file above 8 KiB: a large file must be served
// without ever being read whole.
var largeConfig = strings.NewReplacer(
	"file: {threadpool: {min: 1, max: 2}}", "file: {threadpool: {min: 1, max: 2}, maxReadFile: 8KiB}",
	"args: {maxObject: 4KiB}", "args: {maxObject: 4KiB, chunk: 4KiB}",
).Replace(testConfig)

func TestLargeFileStreamed(t *testing.T) {
	s := startHaboob(t, largeConfig)
	large := make([]byte, 50<<10+123) // 13 pieces, the last one short
	for i := range large {
		large[i] = byte(i*31 + i>>8)
	}
	write(t, filepath.Join(s.root, "large.bin"), string(large))
	fio, err := aio.Files(s.m)
	if err != nil {
		t.Fatal(err)
	}
	c := s.client(t)
	size := strconv.Itoa(len(large))

	// HEAD is answered from the file's metadata: no file request at all.
	before := fio.Stats().Requests
	resp, body := s.do(t, c, "HEAD", "/large.bin")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Length") != size || body != "" {
		t.Fatalf("HEAD: %d Content-Length %q body %q", resp.StatusCode, resp.Header.Get("Content-Length"), body)
	}
	if n := fio.Stats().Requests - before; n != 0 {
		t.Fatalf("HEAD made %d file requests, want none", n)
	}
	etag := resp.Header.Get("ETag")

	// A one-byte range reads one piece: open, read, close.
	before = fio.Stats().Requests
	resp, body = s.do(t, c, "GET", "/large.bin", "Range", "bytes=0-0")
	if resp.StatusCode != 206 || body != string(large[:1]) || resp.Header.Get("Content-Range") != "bytes 0-0/"+size {
		t.Fatalf("Range 0-0: %d %q %q", resp.StatusCode, body, resp.Header.Get("Content-Range"))
	}
	if n := fio.Stats().Requests - before; n > 3 {
		t.Fatalf("a one-byte range made %d file requests", n)
	}

	tests := []struct {
		name    string
		method  string
		headers []string
		status  int
		body    []byte
		crange  string
	}{
		{"whole", "GET", nil, 200, large, ""},
		{"range", "GET", []string{"Range", "bytes=10000-30000"}, 206, large[10000:30001], "bytes 10000-30000/" + size},
		{"suffix", "GET", []string{"Range", "bytes=-5000"}, 206, large[len(large)-5000:], fmt.Sprintf("bytes %d-%d/%s", len(large)-5000, len(large)-1, size)},
		{"open range", "GET", []string{"Range", "bytes=4096-"}, 206, large[4096:], fmt.Sprintf("bytes 4096-%d/%s", len(large)-1, size)},
		{"unsatisfiable", "GET", []string{"Range", "bytes=999999-"}, 416, nil, "bytes */" + size},
		{"not modified", "GET", []string{"If-None-Match", etag}, 304, nil, ""},
		{"head range", "HEAD", []string{"Range", "bytes=0-9"}, 200, nil, ""},
	}
	for _, tt := range tests {
		resp, body := s.do(t, c, tt.method, "/large.bin", tt.headers...)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.status)
			continue
		}
		if tt.status != 416 && body != string(tt.body) {
			t.Errorf("%s: %d bytes, want %d (equal %v)", tt.name, len(body), len(tt.body), body == string(tt.body))
		}
		if tt.crange != "" && resp.Header.Get("Content-Range") != tt.crange {
			t.Errorf("%s: Content-Range %q, want %q", tt.name, resp.Header.Get("Content-Range"), tt.crange)
		}
	}

	// Pipelined: the pieces of one response and the responses after it
	// stay in order.
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /large.bin HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /page.txt HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /large.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=100-199\r\n\r\n"+
		"HEAD /large.bin HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /large.bin HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	for i, want := range []string{string(large), "0123456789", string(large[100:200]), "", string(large)} {
		method := "GET"
		if i == 3 {
			method = "HEAD"
		}
		resp, err := nethttp.ReadResponse(br, &nethttp.Request{Method: method})
		if err != nil {
			t.Fatalf("pipelined response %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || string(body) != want {
			t.Fatalf("pipelined response %d: %d bytes, want %d (%v)", i, len(body), len(want), err)
		}
	}
	if st := s.hb.Cache().Stats(); st.Bytes > 4<<10 {
		t.Fatalf("a file above maxObject was cached: %+v", st)
	}
}

func TestChangedFileRevalidated(t *testing.T) {
	changeThenRemove(t, startHaboob(t, testConfig))
}

// changeThenRemove checks that s serves page.txt, then its new content
// once it changed, then 404 once it is gone.
func changeThenRemove(t *testing.T, s *site) {
	t.Helper()
	c := s.client(t)
	if _, body := s.do(t, c, "GET", "/page.txt"); body != "0123456789" {
		t.Fatalf("got %q", body)
	}
	path := filepath.Join(s.root, "page.txt")
	write(t, path, "changed content")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	poll(t, "the changed file served", func() bool {
		_, body := s.do(t, c, "GET", "/page.txt")
		if body != "changed content" && body != "0123456789" {
			t.Fatalf("got %q", body)
		}
		return body == "changed content"
	})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	poll(t, "the removed file 404", func() bool {
		resp, _ := s.do(t, c, "GET", "/page.txt")
		return resp.StatusCode == 404
	})
}

func TestPipelinedStaticRequests(t *testing.T) {
	s := startHaboob(t, testConfig)
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	paths := []string{"/big.bin", "/index.html", "/missing", "/page.txt", "/docs", "/big.bin", "/style.css", "/checksum/x", "/page.txt"}
	var b strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", p)
	}
	io.WriteString(conn, b.String())
	br := bufio.NewReader(conn)
	want := map[string]int{"/missing": 404, "/docs": 301}
	for _, p := range paths {
		resp, err := nethttp.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		code := 200
		if w, ok := want[p]; ok {
			code = w
		}
		if resp.StatusCode != code {
			t.Fatalf("%s: status %d, want %d", p, resp.StatusCode, code)
		}
		switch p {
		case "/big.bin":
			if string(body) != bigFile {
				t.Fatalf("%s: wrong body (%d bytes)", p, len(body))
			}
		case "/page.txt":
			if string(body) != "0123456789" {
				t.Fatalf("%s: %q", p, body)
			}
		case "/checksum/x":
			if resp.Header.Get("X-Quality") == "" {
				t.Fatalf("%s: not the checksum page", p)
			}
		}
	}
}

func TestRoutesMatchWholeSegments(t *testing.T) {
	config := strings.Replace(testConfig, "routes: {/checksum/: Checksum, /busy/: Busy}",
		"routes: {/checksum/: Checksum, /busy/: Busy, /sum: Checksum}", 1)
	s := startHaboob(t, config)
	write(t, filepath.Join(s.root, "summary"), "static summary")
	write(t, filepath.Join(s.root, "checksum"), "static checksum")
	c := s.client(t)
	for _, tt := range []struct {
		path    string
		dynamic bool
	}{
		{"/sum", true},
		{"/sum/x", true},
		{"/summary", false}, // not under /sum
		{"/checksum/x", true},
		{"/checksum", false}, // "/checksum/" covers only its subtree
	} {
		resp, body := s.do(t, c, "GET", tt.path)
		if dynamic := resp.Header.Get("X-Quality") != ""; dynamic != tt.dynamic || resp.StatusCode != 200 {
			t.Errorf("GET %s: %d %q, dynamic %v, want dynamic %v", tt.path, resp.StatusCode, body, dynamic, tt.dynamic)
		}
	}
}

func TestStatsPage(t *testing.T) {
	s := startHaboob(t, testConfig)
	c := s.client(t)
	s.do(t, c, "GET", "/index.html")
	resp, body := s.do(t, c, "GET", "/stats")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("stats: %d %v", resp.StatusCode, resp.Header)
	}
	for _, want := range []string{"http.requests ", "cache.pages 1", "stage.PageCache queue=", "stage.CacheMiss", "dynamic.Checksum.quality 1.000"} {
		if !strings.Contains(body, want) {
			t.Errorf("stats page lacks %q:\n%s", want, body)
		}
	}
}

func TestOverloadedDynamicStageAnswers503(t *testing.T) {
	s := startHaboob(t, testConfig)
	c := s.client(t)
	// Busy admits one request (a token bucket of depth 1 refilling once
	// every 1000 s); every later one is refused at its queue.
	resp, body := s.do(t, c, "GET", "/busy/1")
	if resp.StatusCode != 200 || !strings.Contains(body, "SHA-256") {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	for i := range 5 {
		resp, _ := s.do(t, c, "GET", "/busy/"+strconv.Itoa(i))
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("request %d: %d Retry-After %q, want 503 with Retry-After", i, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	// The rest of the site is unaffected.
	if resp, _ := s.do(t, c, "GET", "/index.html"); resp.StatusCode != 200 {
		t.Fatalf("static page: %d", resp.StatusCode)
	}
	// Every 503 of a refused enqueue counts as a rejection, wherever the
	// refusal happened.
	if _, body := s.do(t, c, "GET", "/stats"); !strings.Contains(body, "http.requests.rejected 5\n") {
		t.Fatalf("stats page does not count the 5 rejections:\n%s", body)
	}
}

func TestRefusingSendStageAnswers503(t *testing.T) {
	config := strings.Replace(testConfig, "  HttpSend:\n    handler: haboob.HttpSend\n",
		"  HttpSend:\n    handler: haboob.HttpSend\n    predicate: {type: rate, rate: 0.001, depth: 1}\n", 1)
	s := startHaboob(t, config)
	c := s.client(t)
	if resp, _ := s.do(t, c, "GET", "/page.txt"); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	for range 3 {
		if resp, _ := s.do(t, c, "GET", "/page.txt"); resp.StatusCode != 503 {
			t.Fatalf("HttpSend refused the reply but the client got %d", resp.StatusCode)
		}
	}
	hs, err := s.hb.HTTP()
	if err != nil {
		t.Fatal(err)
	}
	if n := hs.Stats().Rejected; n != 3 {
		t.Fatalf("Rejected = %d, want 3", n)
	}
}

func TestBundledSite(t *testing.T) {
	dir := t.TempDir()
	if err := haboob.ExtractSite(haboob.BundledSite(), dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"index.html", "about.html", "style.css", "img/haboob.png", "docs/index.html"} {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.Size() == 0 {
			t.Errorf("bundled %s: %v", name, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, config, want string
	}{
		{"unknown arg", strings.Replace(testConfig, "args: {maxBytes: 1MiB, revalidate: 20ms}", "args: {maxBytes: 1MiB, maxBites: 2}", 1), "maxBites"},
		{"bad route", strings.Replace(testConfig, "/checksum/: Checksum", "checksum/: Checksum", 1), "prefix must start with /"},
		{"route to no stage", strings.Replace(testConfig, "/checksum/: Checksum", "/checksum/: Nowhere", 1), "Nowhere"},
		{"checksum without rt", strings.Replace(testConfig, "predicate: {type: rt, target: 1s, enabled: false}\n    args: {work: 64KiB}", "args: {work: 64KiB}", 1), "needs an rt predicate"},
		{"cache after miss", strings.Replace(testConfig, "  PageCache:\n    handler: haboob.PageCache\n    args: {maxBytes: 1MiB, revalidate: 20ms}\n", "", 1) +
			"  PageCache:\n    handler: haboob.PageCache\n", "declared before it"},
		{"chunk above the write threshold", strings.NewReplacer(
			`http: {addr: "127.0.0.1:0", lingerTimeout: 1m}`, `http: {addr: "127.0.0.1:0", writeThreshold: {bytes: 64KiB}}`,
			"args: {maxObject: 4KiB}", "args: {maxObject: 4KiB, chunk: 48KiB}").Replace(testConfig), "half the HTTP socket's writeThreshold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hb := haboob.New(haboob.Options{Root: t.TempDir()})
			reg := stage.NewRegistry()
			hb.Register(reg)
			m, err := stage.Parse([]byte(tt.config), reg)
			if err == nil {
				err = m.Start(context.Background())
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = m.Shutdown(ctx)
					cancel()
				}
			}
			_ = hb.Close()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// A large POST to a static file is answered 405 without its body being
// buffered, and the client reads the answer and a clean close, not a
// reset (lingering close); a POST to a dynamic route still gets its body.
func TestPostToStaticFileNotBuffered(t *testing.T) {
	s := startHaboob(t, testConfig)
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fmt.Fprint(c, "POST /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n")
		chunk := make([]byte, 1<<20)
		for range 8 {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
		// No half-close: gnet would close the connection at the FIN,
		// perhaps before the answer is written.
	}()
	br := bufio.NewReader(c)
	resp, err := nethttp.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != nethttp.StatusMethodNotAllowed || !resp.Close {
		t.Fatalf("got %d close=%v, want 405 and close", resp.StatusCode, resp.Close)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
		t.Fatalf("after the answer: %q, %v; want a clean end of file", rest, err)
	}
	c.Close() // ends the server's lingering close, and the writer
	wg.Wait()
}
