package haboob_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/browsertest"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
)

// h2Paths are the requests both protocols must answer alike: cached
// pages, a file streamed by the miss path, an index, a redirect, a 404,
// a dynamic page, and HEAD.
var h2Paths = []struct{ method, path string }{
	{"GET", "/page.txt"}, {"GET", "/page.txt"}, {"GET", "/index.html"}, {"GET", "/big.bin"},
	{"GET", "/docs/"}, {"GET", "/docs"}, {"GET", "/missing"}, {"GET", "/checksum/x"},
	{"HEAD", "/big.bin"}, {"HEAD", "/page.txt"}, {"GET", "/a%20b.txt"},
}

// measuredRE matches the live measurement on the dynamic page (its
// stage's p90 response time), which two requests need not share: a
// request's response time moves it.
var measuredRE = regexp.MustCompile(`p90 [^,<]+, `)

// masked returns body with its live measurement masked, and whether it
// had one.
func masked(body []byte) ([]byte, bool) {
	if !measuredRE.Match(body) {
		return body, false
	}
	return measuredRE.ReplaceAll(body, []byte("p90 (measured), ")), true
}

// maskMeasured masks a's live measurement; its Content-Length, which the
// measurement's length moves, is checked against its own body and left
// out of the comparison.
func maskMeasured(t *testing.T, what string, a *h2Answer) {
	t.Helper()
	b, ok := masked(a.body)
	if !ok {
		return
	}
	if cl := a.header.Get("Content-Length"); cl != strconv.Itoa(len(a.body)) {
		t.Errorf("%s: Content-Length %s for %d bytes", what, cl, len(a.body))
	}
	a.header.Del("Content-Length")
	a.body = b
}

type h2Answer struct {
	status int
	header nethttp.Header
	body   []byte
}

// fetch sends one request (with headers as name, value pairs) and
// returns its answer, failing unless it came over HTTP/wantMajor.
func fetch(t *testing.T, c *nethttp.Client, method, url string, wantMajor int, headers ...string) h2Answer {
	t.Helper()
	req, err := nethttp.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != wantMajor {
		t.Fatalf("%s %s: %s, want HTTP/%d", method, url, resp.Proto, wantMajor)
	}
	h := resp.Header.Clone()
	for _, name := range []string{"Date", "Connection", "Keep-Alive"} {
		h.Del(name)
	}
	return h2Answer{resp.StatusCode, h, body}
}

func sameAnswer(t *testing.T, what string, h1, h2 h2Answer) {
	t.Helper()
	if h1.status != h2.status || !bytes.Equal(h1.body, h2.body) {
		t.Errorf("%s: HTTP/1.1 %d (%d bytes), HTTP/2 %d (%d bytes)", what, h1.status, len(h1.body), h2.status, len(h2.body))
	}
	for name, v := range h1.header {
		if !slices.Equal(v, h2.header[name]) {
			t.Errorf("%s: %s is %q over HTTP/1.1, %q over HTTP/2", what, name, v, h2.header[name])
		}
	}
	for name := range h2.header {
		if _, ok := h1.header[name]; !ok {
			t.Errorf("%s: %s only over HTTP/2", what, name)
		}
	}
}

// startHTTPS starts Haboob with an HTTPS listener (extra: more lines of
// its tls: args) and returns it with the roots that verify it.
func startHTTPS(t *testing.T, extra string) (*site, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	roots := x509.NewCertPool()
	writeCert(t, dir, "default", roots, "localhost", "127.0.0.1")
	writeCert(t, dir, "other", roots, "other.test")
	cfg := strings.Replace(tlsConfig(dir), "      tls:\n", "      tls:\n"+extra, 1)
	return startHaboob(t, cfg), roots
}

func noRedirect(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse }

// TestHTTP2MatchesHTTP1 fetches the same pages over HTTPS with HTTP/1.1
// and with h2 (ALPN), and over plain HTTP/1.1 and h2c with prior
// knowledge: statuses, headers and bytes are the same.
func TestHTTP2MatchesHTTP1(t *testing.T) {
	s, roots := startHTTPS(t, "")
	tlsAddr := s.hb.TLSAddr().String()

	h1 := &nethttp.Client{Transport: &nethttp.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
		CheckRedirect: noRedirect, Timeout: 30 * time.Second}
	h2tls := &nethttp.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
		CheckRedirect: noRedirect, Timeout: 30 * time.Second}
	h2c := &nethttp.Client{Transport: h2test.Transport(), CheckRedirect: noRedirect, Timeout: 30 * time.Second}
	defer func() {
		h1.CloseIdleConnections()
		h2tls.CloseIdleConnections()
		h2c.CloseIdleConnections()
		waitConnsClosed(t, s)
	}()
	for _, p := range h2Paths {
		a1 := fetch(t, h1, p.method, "https://"+tlsAddr+p.path, 1)
		a2 := fetch(t, h2tls, p.method, "https://"+tlsAddr+p.path, 2)
		c1 := fetch(t, h1, p.method, "http://"+s.addr+p.path, 1)
		c2 := fetch(t, h2c, p.method, "http://"+s.addr+p.path, 2)
		for _, a := range []*h2Answer{&a1, &a2, &c1, &c2} {
			maskMeasured(t, p.method+" "+p.path, a)
		}
		sameAnswer(t, "https "+p.method+" "+p.path, a1, a2)
		sameAnswer(t, "http "+p.method+" "+p.path, c1, c2)
	}
	hs, err := s.hb.HTTPS()
	if err != nil {
		t.Fatal(err)
	}
	if st := hs.Stats().HTTP2; st.Connections != 1 || st.Streams != uint64(len(h2Paths)) {
		t.Errorf("HTTPS h2 stats %+v, want 1 connection, %d streams", st, len(h2Paths))
	}
}

// TestHTTP2CanBeTurnedOff: with `tls: {http2: false}` ALPN picks
// http/1.1 even for a client that prefers h2.
func TestHTTP2CanBeTurnedOff(t *testing.T) {
	s, roots := startHTTPS(t, "        http2: false\n")
	for _, tc := range []struct {
		addr string
		want string
	}{{s.hb.TLSAddr().String(), "http/1.1"}} {
		conn, err := tls.Dial("tcp", tc.addr, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := conn.ConnectionState().NegotiatedProtocol; got != tc.want {
			t.Errorf("ALPN chose %q, want %q", got, tc.want)
		}
		conn.Close()
	}
	waitConnsClosed(t, s)
}

// waitConnsClosed waits until Haboob's servers (and their sockets) have
// closed every connection the test's clients opened: a client's close is
// noticed and counted by the server, not only by the shutdown at the end
// of the test.
func waitConnsClosed(t *testing.T, s *site) {
	t.Helper()
	for _, get := range []func() (*http.Server, error){s.hb.HTTP, s.hb.HTTPS} {
		srv, err := get()
		if err != nil {
			continue
		}
		deadline := time.Now().Add(10 * time.Second) // a hang guard only
		for srv.Stats().Open > 0 || len(srv.Socket().Connections()) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still open", srv.Stats().Open)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// curlAnswer runs curl with args on url and returns the status, the
// headers (lower-case names, without date and connection) and the body.
func curlAnswer(t *testing.T, url string, args ...string) (int, map[string]string, []byte) {
	t.Helper()
	var head bytes.Buffer
	out := "-" // the body on standard output; with -I curl writes the header there too
	if slices.Contains(args, "-I") {
		out = "/dev/null"
	}
	cmd := exec.Command("curl", append([]string{"-sS", "-k", "--max-time", "30", "-D", "/dev/stderr", "-o", out}, append(args, url)...)...)
	cmd.Stderr = &head
	body, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl %v %s: %v\n%s", args, url, err, head.String())
	}
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(head.String(), "\r\n", "\n")), "\n")
	status := 0
	hdr := map[string]string{}
	for i, line := range lines {
		if i == 0 {
			f := strings.Fields(line)
			if len(f) >= 2 {
				status = atoi(f[1])
			}
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name = strings.ToLower(strings.TrimSpace(name))
		if !ok || name == "date" || name == "connection" || name == "keep-alive" {
			continue
		}
		hdr[name] = strings.TrimSpace(value)
	}
	return status, hdr, body
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return n
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// TestCurlHTTP2 checks that curl --http2 (over TLS) and
// --http2-prior-knowledge get the bytes, statuses and headers curl
// --http1.1 gets. It skips without curl.
func TestCurlHTTP2(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	s, _ := startHTTPS(t, "")
	tlsURL := "https://" + s.hb.TLSAddr().String()
	for _, p := range h2Paths {
		method := []string{"-X", p.method}
		if p.method == "HEAD" {
			method = []string{"-I"}
		}
		for _, tc := range []struct{ url, h2 string }{
			{tlsURL, "--http2"}, {"http://" + s.addr, "--http2-prior-knowledge"},
		} {
			s1, h1, b1 := curlAnswer(t, tc.url+p.path, append(method, "--http1.1")...)
			s2, h2, b2 := curlAnswer(t, tc.url+p.path, append(method, tc.h2)...)
			// The dynamic page's live measurement (and so its length)
			// need not be the same in two requests.
			for _, a := range []struct {
				h map[string]string
				b *[]byte
			}{{h1, &b1}, {h2, &b2}} {
				if m, ok := masked(*a.b); ok {
					if cl := a.h["content-length"]; cl != "" && cl != strconv.Itoa(len(*a.b)) {
						t.Errorf("curl %s %s: content-length %s for %d bytes", tc.h2, p.path, cl, len(*a.b))
					}
					delete(a.h, "content-length")
					*a.b = m
				}
			}
			if s1 != s2 || !bytes.Equal(b1, b2) || len(h1) != len(h2) {
				t.Errorf("curl %s %s: %d %v (%d bytes) vs %d %v (%d bytes)", tc.h2, p.path, s1, h1, len(b1), s2, h2, len(b2))
				continue
			}
			for k, v := range h1 {
				if h2[k] != v {
					t.Errorf("curl %s %s: %s %q over HTTP/1.1, %q over HTTP/2", tc.h2, p.path, k, v, h2[k])
				}
			}
		}
	}
	hs, err := s.hb.HTTPS()
	if err != nil {
		t.Fatal(err)
	}
	hp, err := s.hb.HTTP()
	if err != nil {
		t.Fatal(err)
	}
	if a, b := hs.Stats().HTTP2.Streams, hp.Stats().HTTP2.Streams; a != uint64(len(h2Paths)) || b != uint64(len(h2Paths)) {
		t.Errorf("h2 streams served: HTTPS %d, HTTP %d, want %d each", a, b, len(h2Paths))
	}
	waitConnsClosed(t, s)
}

// TestBrowserLoadsPageOverHTTP2 loads a Haboob page over HTTPS in
// headless Chromium and checks that the page came and that it came over
// h2 (the HTTPS server's h2 stream count). It skips without Chromium.
func TestBrowserLoadsPageOverHTTP2(t *testing.T) {
	b := browsertest.New(t) // skips without chromium or in -short mode
	s, _ := startHTTPS(t, "")
	url := "https://localhost:" + portOf(s.hb.TLSAddr().String()) + "/index.html"
	ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, browsertest.Path(), "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--disable-quic", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--user-data-dir="+t.TempDir(),
		"--ignore-certificate-errors", "--dump-dom", url).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	browsertest.SaveArtifact(t, "haboob-h2-page.html", out)
	if !strings.Contains(string(out), "<h1>home</h1>") {
		t.Fatalf("the page did not load: %s", out)
	}
	hs, err := s.hb.HTTPS()
	if err != nil {
		t.Fatal(err)
	}
	st := hs.Stats()
	if st.HTTP2.Streams == 0 || st.HTTP2.Connections == 0 {
		t.Fatalf("chromium's requests did not come over h2: %+v", st.HTTP2)
	}
	t.Logf("chromium: %d h2 connections, %d streams, %d requests in all", st.HTTP2.Connections, st.HTTP2.Streams, st.Requests)
	waitConnsClosed(t, s)
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// h2FilesConfig is the HTTPS test site with the default sendfileMin (16
// KiB) and files up to 1 MiB cached: small files are answered from the
// page cache, the others from the open-file cache (file bodies) on the
// plain port and read per request over TLS.
func startH2Files(t *testing.T) (*site, *x509.CertPool, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	roots := x509.NewCertPool()
	writeCert(t, dir, "default", roots, "localhost", "127.0.0.1")
	writeCert(t, dir, "other", roots, "other.test")
	cfg := strings.Replace(tlsConfig(dir), "args: {maxObject: 4KiB}", "args: {maxObject: 1MiB}", 1)
	s := startHaboob(t, cfg)
	files := map[string][]byte{}
	for name, size := range map[string]int{"small.bin": 10 << 10, "edge.bin": 16 << 10, "mid.bin": 300<<10 + 7, "large.bin": 3<<20 + 11} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i*31 + i>>12)
		}
		write(t, filepath.Join(s.root, name), string(b))
		files["/"+name] = b
	}
	return s, roots, files
}

// TestHTTP2FilesMatchHTTP1 fetches files below and above sendfileMin,
// whole, by range, HEAD and conditionally, over h2c and h2 over TLS:
// each answer is the HTTP/1.1 one, byte for byte, and the h2c answers
// came from the open-file cache.
func TestHTTP2FilesMatchHTTP1(t *testing.T) {
	s, roots, files := startH2Files(t)
	tlsAddr := s.hb.TLSAddr().String()
	h1 := &nethttp.Client{Transport: &nethttp.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: time.Minute}
	h2tls := &nethttp.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: time.Minute}
	h2c := &nethttp.Client{Transport: h2test.Transport(), Timeout: time.Minute}
	defer func() {
		h1.CloseIdleConnections()
		h2tls.CloseIdleConnections()
		h2c.CloseIdleConnections()
		waitConnsClosed(t, s)
	}()
	for path, data := range files {
		etag := fetch(t, h1, "HEAD", "http://"+s.addr+path, 1).header.Get("ETag")
		for _, tc := range []struct {
			method  string
			headers []string
		}{
			{"GET", nil}, {"GET", nil}, {"HEAD", nil},
			{"GET", []string{"Range", "bytes=100-9999"}},
			{"GET", []string{"Range", "bytes=-5000"}},
			{"GET", []string{"If-None-Match", etag}},
		} {
			what := fmt.Sprintf("%s %s %v", tc.method, path, tc.headers)
			c1 := fetch(t, h1, tc.method, "http://"+s.addr+path, 1, tc.headers...)
			c2 := fetch(t, h2c, tc.method, "http://"+s.addr+path, 2, tc.headers...)
			sameAnswer(t, "h2c "+what, c1, c2)
			a1 := fetch(t, h1, tc.method, "https://"+tlsAddr+path, 1, tc.headers...)
			a2 := fetch(t, h2tls, tc.method, "https://"+tlsAddr+path, 2, tc.headers...)
			sameAnswer(t, "h2 "+what, a1, a2)
			if tc.method == "GET" && tc.headers == nil && !bytes.Equal(c2.body, data) {
				t.Errorf("%s: %d bytes, not the file's %d", what, len(c2.body), len(data))
			}
		}
	}
	st := s.hb.Cache().Stats()
	if st.OpenFiles != 3 || st.OpenFileHits == 0 {
		t.Errorf("the files from sendfileMin were not answered from the open-file cache: %+v", st)
	}
	for path := range files {
		if refs := haboob.OpenFileRefs(s.hb.Cache(), path); refs > 1 {
			t.Errorf("%s: %d references left after the answers, want the cache's only", path, refs)
		}
	}
}

// TestHTTP2ManyFileStreamsSmallWindow asks for large files on many
// streams of one h2c connection with a 16 KiB stream window: no stream
// gets DATA past its window, the streams interleave, every body is the
// file's, and every reference to the files is given back.
func TestHTTP2ManyFileStreamsSmallWindow(t *testing.T) {
	s, _, files := startH2Files(t)
	const window = 16 << 10
	c := h2test.Dial(t, s.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	paths := map[uint32]string{}
	for i := range 12 {
		id := uint32(2*i + 1)
		paths[id] = []string{"/large.bin", "/mid.bin", "/edge.bin"}[i%3]
		if err := c.Get(id, paths[id]); err != nil {
			t.Fatal(err)
		}
	}
	ids := make([]uint32, 0, len(paths))
	for id := range paths {
		ids = append(ids, id)
	}
	bodies, order, err := c.Bodies(window, ids...)
	if err != nil {
		t.Fatal(err)
	}
	switches := 0
	for i := range order {
		if i == 0 || order[i] != order[i-1] {
			switches++
		}
	}
	for id, path := range paths {
		if !bytes.Equal(bodies[id], files[path]) {
			t.Errorf("stream %d %s: %d bytes, not the file's %d", id, path, len(bodies[id]), len(files[path]))
		}
	}
	if switches < len(paths)*2 {
		t.Errorf("the streams did not interleave: %d switches between streams", switches)
	}
	for _, path := range []string{"/large.bin", "/mid.bin", "/edge.bin"} {
		poll(t, path+" references given back", func() bool { return haboob.OpenFileRefs(s.hb.Cache(), path) == 1 })
	}
}

// TestHTTP2FileReleasedMidBody gives up on a large file's response after
// its first DATA frame, by resetting the stream or closing the
// connection: the response's reference to the open-file cache's file is
// given back (the cache's own stays), and after a reset the connection
// still serves.
func TestHTTP2FileReleasedMidBody(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reset bool
	}{{"reset", true}, {"close", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, files := startH2Files(t)
			c := h2test.Dial(t, s.addr) // default window, no WINDOW_UPDATE: the response stalls after 64 KiB
			if err := c.Get(1, "/large.bin"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.FirstData(1); err != nil {
				t.Fatal(err)
			}
			if refs := haboob.OpenFileRefs(s.hb.Cache(), "/large.bin"); refs != 2 {
				t.Fatalf("%d references while the file is sent, want the cache's and the response's", refs)
			}
			if !tc.reset {
				c.Conn.Close()
				poll(t, "the response's reference", func() bool { return haboob.OpenFileRefs(s.hb.Cache(), "/large.bin") == 1 })
				return
			}
			if err := c.Framer.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
			poll(t, "the response's reference", func() bool { return haboob.OpenFileRefs(s.hb.Cache(), "/large.bin") == 1 })
			_ = c.Framer.WriteWindowUpdate(0, 1<<20) // what stream 1 used of the connection's window
			if err := c.Get(3, "/edge.bin"); err != nil {
				t.Fatal(err)
			}
			status, body, err := c.Response(3)
			if err != nil || status != "200" || !bytes.Equal(body, files["/edge.bin"]) {
				t.Fatalf("after the reset: %s, %d bytes, not the file's %d (%v)", status, len(body), len(files["/edge.bin"]), err)
			}
			hp, err := s.hb.HTTP()
			if err != nil {
				t.Fatal(err)
			}
			if st := hp.Stats().HTTP2; st.ResetsIn != 1 {
				t.Errorf("ResetsIn %d, want 1", st.ResetsIn)
			}
		})
	}
}

// TestHTTP2MissesNotSerialised: over h2 on TLS, files above maxObject are
// streamed by CacheMiss. A stream whose client gives it no window holds
// up its own transfer only: the connection's next stream, asking for the
// same kind of file, gets its whole body meanwhile.
func TestHTTP2MissesNotSerialised(t *testing.T) {
	s, roots, files := startH2Files(t)
	conn, err := tls.Dial("tcp", s.hb.TLSAddr().String(), &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	c := h2test.On(t, conn)
	if err := c.Get(1, "/large.bin"); err != nil { // stalls once its 64 KiB window is used
		t.Fatal(err)
	}
	if err := c.Get(3, "/large.bin"); err != nil {
		t.Fatal(err)
	}
	_ = c.Framer.WriteWindowUpdate(0, 64<<20)
	status, body, err := c.Response(3) // gives back what stream 3 uses only
	if err != nil || status != "200" || !bytes.Equal(body, files["/large.bin"]) {
		t.Fatalf("stream 3: %s, %d bytes, not the file's %d (%v)", status, len(body), len(files["/large.bin"]), err)
	}
	c.Conn.Close()
	waitConnsClosed(t, s)
}

// TestStatsShowsHTTP2: /stats has the HTTP/2 counters of both listeners,
// h2c on the plain one and h2 on the HTTPS one, counting the streams
// each served.
func TestStatsShowsHTTP2(t *testing.T) {
	s, roots := startHTTPS(t, "")
	h2tls := &nethttp.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 30 * time.Second}
	h2c := &nethttp.Client{Transport: h2test.Transport(), Timeout: 30 * time.Second}
	defer func() {
		h2tls.CloseIdleConnections()
		h2c.CloseIdleConnections()
		waitConnsClosed(t, s)
	}()
	for range 2 {
		fetch(t, h2c, "GET", "http://"+s.addr+"/page.txt", 2)
	}
	fetch(t, h2tls, "GET", "https://"+s.hb.TLSAddr().String()+"/page.txt", 2)
	code, body := s.raw(t, "/stats")
	if code != 200 {
		t.Fatalf("/stats: %d", code)
	}
	for _, want := range []string{"http.h2.connections 1\n", "http.h2.streams 2\n", "https.h2.connections 1\n",
		"https.h2.streams 1\n", "http.h2.resets.in 0\n", "https.h2.bounded.resets 0\n", "http.h2.timeouts.write 0\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/stats lacks %q:\n%s", want, body)
		}
	}
}

// TestDisableHTTP2Option: Options.DisableHTTP2 (haboob -http2=false)
// turns HTTP/2 off on both listeners: ALPN picks http/1.1, and the h2c
// preface on the plain port is not HTTP/2 (the client fails, nothing is
// counted as h2); HTTP/1.1 is served on both.
func TestDisableHTTP2Option(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	roots := x509.NewCertPool()
	writeCert(t, dir, "default", roots, "localhost", "127.0.0.1")
	writeCert(t, dir, "other", roots, "other.test")
	write(t, filepath.Join(root, "page.txt"), "0123456789")
	s := startSite(t, tlsConfig(dir), haboob.Options{Root: root, DisableHTTP2: true}, nil)
	conn, err := tls.Dial("tcp", s.hb.TLSAddr().String(), &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.ConnectionState().NegotiatedProtocol; got != "http/1.1" {
		t.Errorf("ALPN chose %q, want http/1.1", got)
	}
	conn.Close()
	h1 := &nethttp.Client{Transport: &nethttp.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 30 * time.Second}
	h2c := &nethttp.Client{Transport: h2test.Transport(), Timeout: 30 * time.Second}
	defer func() {
		h1.CloseIdleConnections()
		h2c.CloseIdleConnections()
		waitConnsClosed(t, s)
	}()
	if _, err := h2c.Get("http://" + s.addr + "/page.txt"); err == nil {
		t.Error("an h2c request was answered with HTTP/2 turned off")
	}
	for _, url := range []string{"http://" + s.addr, "https://" + s.hb.TLSAddr().String()} {
		if a := fetch(t, h1, "GET", url+"/page.txt", 1); string(a.body) != "0123456789" {
			t.Errorf("%s over HTTP/1.1: %d %q", url, a.status, a.body)
		}
	}
	hp, err := s.hb.HTTP()
	if err != nil {
		t.Fatal(err)
	}
	if n := hp.Stats().HTTP2.Connections; n != 0 {
		t.Errorf("%d h2 connections on the plain port", n)
	}
}
