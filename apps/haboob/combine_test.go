package haboob_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// combineConfig is testConfig with HttpRecv's combine arg set and the
// page cache's revalidation period replaced.
func combineConfig(combine bool, revalidate string) string {
	c := strings.Replace(testConfig, "routes: {/checksum/: Checksum, /busy/: Busy}",
		fmt.Sprintf("routes: {/checksum/: Checksum, /busy/: Busy}\n      combine: %v", combine), 1)
	return strings.Replace(c, "revalidate: 20ms", "revalidate: "+revalidate, 1)
}

// inline reads the requests answered by the Combine path from /stats.
func (s *site) inline(t testing.TB) int {
	t.Helper()
	code, body := s.raw(t, "/stats")
	if code != 200 {
		t.Fatalf("/stats: %d", code)
	}
	m := regexp.MustCompile(`(?m)^requests\.inline (\d+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/stats lacks requests.inline:\n%s", body)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var dateField = regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)

// exchange sends one raw request on a new keep-alive connection and
// returns the response's bytes as received, its Date field blanked (two
// responses a second apart differ there).
func (s *site) exchange(t *testing.T, request string) string {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &got))
	method, _, _ := strings.Cut(request, " ")
	resp, err := nethttp.ReadResponse(br, &nethttp.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if br.Buffered() > 0 {
		t.Fatalf("%d bytes after the response", br.Buffered())
	}
	return dateField.ReplaceAllString(got.String(), "Date: -\r")
}

// TestCombineSameBytesAsStages: a cached page answered inline on the
// event loop is byte for byte the response the PageCache and HttpSend
// stages send (status line, every header field, body), for a plain GET,
// a HEAD, a conditional GET (304) and byte ranges (206, 416); the inline
// counter moves only on the server that combines.
func TestCombineSameBytesAsStages(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "page.txt"), "0123456789")
	write(t, filepath.Join(root, "index.html"), "<h1>home</h1>")
	staged, _ := startLogged(t, combineConfig(false, "1h"), root, "127.0.0.1:0")
	combined, _ := startLogged(t, combineConfig(true, "1h"), root, "127.0.0.1:0")

	get := func(path string, fields ...string) string {
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", path, strings.Join(fields, ""))
	}
	for _, s := range []*site{staged, combined} {
		for _, p := range []string{"/page.txt", "/index.html"} {
			s.exchange(t, get(p)) // a miss: brings the page into the cache
		}
	}
	etag := func() string {
		resp, err := nethttp.ReadResponse(bufio.NewReader(strings.NewReader(staged.exchange(t, get("/page.txt")))), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Get("ETag")
	}()
	if etag == "" {
		t.Fatal("no ETag")
	}
	requests := []string{
		get("/page.txt"),
		get("/index.html"),
		"HEAD /page.txt HTTP/1.1\r\nHost: x\r\n\r\n",
		get("/page.txt", "If-None-Match: "+etag+"\r\n"),
		get("/page.txt", "Range: bytes=2-5\r\n"),
		get("/page.txt", "Range: bytes=50-\r\n"),
	}
	for _, req := range requests {
		before := combined.inline(t)
		want := staged.exchange(t, req)
		got := combined.exchange(t, req)
		if got != want {
			t.Errorf("%q:\ninline:\n%s\nstaged:\n%s", req, got, want)
		}
		if n := combined.inline(t); n != before+1 {
			t.Errorf("%q: inline counter %d -> %d, want one more", req, before, n)
		}
	}
	if n := staged.inline(t); n != 0 {
		t.Errorf("server without combine answered %d requests inline", n)
	}
}

// TestCombinePipelinedInOrder: pipelined requests mixing cached pages
// (answered inline), misses, a streamed file, a redirect, a 404 and a
// dynamic page come back in request order with the right bodies, and only
// the cached pages were answered inline.
func TestCombinePipelinedInOrder(t *testing.T) {
	s := startHaboob(t, combineConfig(true, "1h"))
	c := s.client(t)
	for _, p := range []string{"/index.html", "/page.txt", "/style.css"} {
		s.do(t, c, "GET", p)
	}
	before := s.inline(t)
	type want struct {
		path, body string
		status     int
	}
	reqs := []want{
		{"/page.txt", "0123456789", 200},
		{"/big.bin", bigFile, 200},
		{"/index.html", "<h1>home</h1>", 200},
		{"/missing", "", 404},
		{"/style.css", "body{}", 200},
		{"/img/dot.png", "\x89PNG fake", 200}, // not cached yet
		{"/page.txt", "0123456789", 200},
		{"/checksum/x", "", 200},
		{"/docs", "", 301},
		{"/index.html", "<h1>home</h1>", 200},
	}
	hits := 5 // the requests for the three pages fetched above
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", r.path)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i, r := range reqs {
		resp, err := nethttp.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d (%s): %v", i, r.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != r.status {
			t.Fatalf("response %d (%s): status %d, want %d", i, r.path, resp.StatusCode, r.status)
		}
		switch {
		case r.path == "/checksum/x":
			if resp.Header.Get("X-Quality") == "" {
				t.Fatalf("response %d: not the checksum page", i)
			}
		case r.status == 200 && string(body) != r.body:
			t.Fatalf("response %d (%s): body %.40q, want %.40q", i, r.path, body, r.body)
		}
	}
	if n := s.inline(t) - before; n != hits {
		t.Errorf("%d requests answered inline, want %d", n, hits)
	}
}

// counters reads requests.inline and the events of the PageCache,
// HttpSend and CacheMiss stages from one /stats page (whose own response
// goes through HttpSend after it was read).
func (s *site) counters(t *testing.T) (inline, cache, send, miss int) {
	t.Helper()
	_, body := s.raw(t, "/stats")
	read := func(pattern string) int {
		m := regexp.MustCompile(pattern).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("/stats lacks %s:\n%s", pattern, body)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	events := func(stage string) int { return read(`(?m)^stage\.` + stage + ` .* events=(\d+) `) }
	return read(`(?m)^requests\.inline (\d+)$`), events("PageCache"), events("HttpSend"), events("CacheMiss")
}

// combineSendfileConfig is testConfig with combine on, files from 4 KiB
// sent with sendfile, and pages and open files revalidated every period.
func combineSendfileConfig(period string) string {
	return withCombineSendfile(testConfig, period)
}

// withCombineSendfile is config (testConfig or one made from it) with
// combineSendfileConfig's changes.
func withCombineSendfile(config, period string) string {
	return strings.NewReplacer(
		"args: {maxBytes: 1MiB, revalidate: 20ms}", "args: {maxBytes: 1MiB, revalidate: "+period+", openFiles: {valid: "+period+"}}",
		"args: {maxObject: 4KiB}", "args: {maxObject: 1MiB, sendfileMin: 4KiB}",
		"routes: {/checksum/: Checksum, /busy/: Busy}", "routes: {/checksum/: Checksum, /busy/: Busy}\n      combine: true",
	).Replace(config)
}

// TestCombineStaleAnsweredInline: with combine on, a page or an open file
// due for revalidation is answered inline on the event loop, no event
// through PageCache or HttpSend, while its check goes to CacheMiss; a
// changed file is then served, a removed one is 404.
func TestCombineStaleAnsweredInline(t *testing.T) {
	// Every page and open file is due for revalidation at each request.
	s := startHaboob(t, combineSendfileConfig("1ns"))
	c := s.client(t)
	tests := []struct{ path, body string }{{"/page.txt", "0123456789"}, {"/big.bin", bigFile}}
	for _, tc := range tests {
		if _, body := s.do(t, c, "GET", tc.path); body != tc.body { // a miss: cached
			t.Fatalf("%s: got %d bytes", tc.path, len(body))
		}
		// The miss's stage events are counted once its batches end,
		// maybe after its response arrived: wait until only /stats moves.
		var inline, cache, send, miss int
		poll(t, "the stages settled", func() bool {
			_, c1, s1, _ := s.counters(t)
			inline, cache, send, miss = s.counters(t)
			return cache == c1 && send == s1+1
		})
		const n = 5
		for range n {
			if _, body := s.do(t, c, "GET", tc.path); body != tc.body {
				t.Fatalf("%s: got %d bytes", tc.path, len(body))
			}
		}
		inline2, cache2, send2, _ := s.counters(t)
		if got := inline2 - inline; got != n {
			t.Errorf("%s: %d of %d stale hits answered inline", tc.path, got, n)
		}
		if got := cache2 - cache; got != 0 {
			t.Errorf("%s: %d events through PageCache, want 0", tc.path, got)
		}
		if got := send2 - send; got != 1 { // the first /stats page's response
			t.Errorf("%s: %d events through HttpSend, want 1 (/stats)", tc.path, got)
		}
		poll(t, tc.path+"'s checks on CacheMiss", func() bool {
			_, _, _, m := s.counters(t)
			return m-miss >= 1
		})
	}
	changeThenRemove(t, s)
	// A period long enough for hits to be fresh in between: the change
	// is still found.
	changeThenRemove(t, startHaboob(t, combineConfig(true, "20ms")))
}

// TestCombineOnlyWhereHttpSendWouldWrite: when PageCache sends its hits
// through a stage of another kind (one that could rewrite them), combine
// stays out of the way: every hit goes through that stage.
func TestCombineOnlyWhereHttpSendWouldWrite(t *testing.T) {
	config := strings.Replace(combineConfig(true, "1h"), "args: {maxBytes: 1MiB, revalidate: 1h}",
		"args: {maxBytes: 1MiB, revalidate: 1h, send: Relay}", 1) + `
  Relay:
    handler: test.Relay
`
	var relayed atomic.Int64
	root := t.TempDir()
	write(t, filepath.Join(root, "index.html"), "<h1>home</h1>")
	s := startSite(t, config, haboob.Options{Root: root}, func(reg *stage.Registry) {
		reg.Register("test.Relay", func() stage.Handler {
			return stage.HandlerFunc(func(batch []sink.Event) error {
				for _, e := range batch {
					r := e.(*http.Reply)
					relayed.Add(1)
					_ = r.Req.Conn.(*http.Connection).Send(r)
				}
				return nil
			})
		})
	})
	c := s.client(t)
	for range 3 {
		if resp, body := s.do(t, c, "GET", "/index.html"); resp.StatusCode != 200 || body != "<h1>home</h1>" {
			t.Fatalf("GET /index.html: %d %q", resp.StatusCode, body)
		}
	}
	if n := s.inline(t); n != 0 {
		t.Fatalf("%d hits answered inline past the Relay stage", n)
	}
	if n := relayed.Load(); n != 2 { // the first request was a miss
		t.Fatalf("Relay sent %d hits, want 2", n)
	}
}
