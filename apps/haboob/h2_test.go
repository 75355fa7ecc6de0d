package haboob_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	nethttp "net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/browsertest"
)

// h2Paths are the requests both protocols must answer alike: cached
// pages, a file streamed by the miss path, an index, a redirect, a 404,
// a dynamic page, and HEAD.
var h2Paths = []struct{ method, path string }{
	{"GET", "/page.txt"}, {"GET", "/page.txt"}, {"GET", "/index.html"}, {"GET", "/big.bin"},
	{"GET", "/docs/"}, {"GET", "/docs"}, {"GET", "/missing"}, {"GET", "/checksum/x"},
	{"HEAD", "/big.bin"}, {"HEAD", "/page.txt"}, {"GET", "/a%20b.txt"},
}

type h2Answer struct {
	status int
	header nethttp.Header
	body   []byte
}

func fetch(t *testing.T, c *nethttp.Client, method, url string, wantMajor int) h2Answer {
	t.Helper()
	req, err := nethttp.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
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
	h2c := &nethttp.Client{Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}, CheckRedirect: noRedirect, Timeout: 30 * time.Second}
	defer func() {
		h1.CloseIdleConnections()
		h2tls.CloseIdleConnections()
		h2c.CloseIdleConnections()
		waitConnsClosed(t, s)
	}()
	for _, p := range h2Paths {
		a1 := fetch(t, h1, p.method, "https://"+tlsAddr+p.path, 1)
		a2 := fetch(t, h2tls, p.method, "https://"+tlsAddr+p.path, 2)
		sameAnswer(t, "https "+p.method+" "+p.path, a1, a2)
		c1 := fetch(t, h1, p.method, "http://"+s.addr+p.path, 1)
		c2 := fetch(t, h2c, p.method, "http://"+s.addr+p.path, 2)
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
// closed every connection the test's clients opened, so that the
// shutdown at the end of the test has no TLS connection left to close.
// (aio's Shutdown closing a TLS connection reads state its event loop
// wrote without synchronization: a race the race detector reports,
// aio/tlsconn.go sendCloseNotify against startTLS.)
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
