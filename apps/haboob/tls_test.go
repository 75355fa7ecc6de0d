package haboob_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	nethttp "net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
)

// tlsConfig is testConfig with an HTTPS listener using the certificates
// in dir (default.crt for localhost, other.crt for other.test).
func tlsConfig(dir string) string {
	return strings.Replace(testConfig, "      routes: {/checksum/: Checksum, /busy/: Busy}\n",
		fmt.Sprintf(`      routes: {/checksum/: Checksum, /busy/: Busy}
      tls:
        addr: "127.0.0.1:0"
        cert: %s
        key: %s
        certs: [{cert: %s, key: %s}]
`, filepath.Join(dir, "default.crt"), filepath.Join(dir, "default.key"),
			filepath.Join(dir, "other.crt"), filepath.Join(dir, "other.key")), 1)
}

func writeCert(t testing.TB, dir, name string, roots *x509.CertPool, hosts ...string) {
	t.Helper()
	c, err := aio.SelfSigned(0, hosts...)
	if err != nil {
		t.Fatal(err)
	}
	roots.AddCert(c.Leaf)
	key, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, name+".crt"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})))
	write(t, filepath.Join(dir, name+".key"), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})))
}

func TestHTTPS(t *testing.T) {
	dir := t.TempDir()
	roots := x509.NewCertPool()
	writeCert(t, dir, "default", roots, "localhost", "127.0.0.1")
	writeCert(t, dir, "other", roots, "other.test")
	s := startHaboob(t, tlsConfig(dir))
	addr := s.hb.TLSAddr().String()

	// net/http over TLS 1.2 and 1.3, keep-alive: static, cached, big and dynamic.
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		tr := &nethttp.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MaxVersion: v,
			ClientSessionCache: tls.NewLRUClientSessionCache(8)}}
		c := &nethttp.Client{Transport: tr, Timeout: 30 * time.Second}
		for _, tc := range []struct{ path, want string }{
			{"/page.txt", "0123456789"}, {"/page.txt", "0123456789"}, {"/big.bin", bigFile}, {"/index.html", "<h1>home</h1>"},
		} {
			resp, err := c.Get("https://" + addr + tc.path)
			if err != nil {
				t.Fatalf("%s GET %s: %v", tls.VersionName(v), tc.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != tc.want {
				t.Fatalf("%s GET %s: %d, %d bytes", tls.VersionName(v), tc.path, resp.StatusCode, len(body))
			}
			if resp.TLS == nil || resp.TLS.Version != v {
				t.Fatalf("%s: TLS state %+v", tls.VersionName(v), resp.TLS)
			}
		}
		resp, err := c.Get("https://" + addr + "/checksum/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("dynamic page over HTTPS: %d", resp.StatusCode)
		}
		// A new connection resumes the session.
		tr.CloseIdleConnections()
		resp, err = c.Get("https://" + addr + "/page.txt")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !resp.TLS.DidResume {
			t.Fatalf("%s: second connection did not resume", tls.VersionName(v))
		}
		tr.CloseIdleConnections()
	}

	// SNI picks the other certificate.
	// (HTTP/1.1 by ALPN: h2 is offered first, see h2_test.go.)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "other.test", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatalf("SNI other.test: %v", err)
	}
	if got := conn.ConnectionState().PeerCertificates[0].DNSNames[0]; got != "other.test" {
		t.Fatalf("SNI other.test: certificate for %q", got)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Fatalf("ALPN: negotiated %q; want http/1.1", p)
	}
	// Pipelined requests on that connection come back in order.
	const n = 20
	var req strings.Builder
	for i := range n {
		p := "/page.txt"
		if i%2 == 1 {
			p = "/style.css"
		}
		fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: other.test\r\n\r\n", p)
	}
	if _, err := conn.Write([]byte(req.String())); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(conn)
	for i := range n {
		resp, err := nethttp.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined response %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		want := "0123456789"
		if i%2 == 1 {
			want = "body{}"
		}
		if resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("pipelined response %d: %d %q", i, resp.StatusCode, body)
		}
	}
	conn.Close()

	// Plain HTTP still works beside it.
	resp, body := s.do(t, s.client(t), "GET", "/page.txt")
	if resp.StatusCode != 200 || body != "0123456789" {
		t.Fatalf("plain HTTP beside HTTPS: %d %q", resp.StatusCode, body)
	}
}

func TestHTTPSReloadKeepsConnections(t *testing.T) {
	dir := t.TempDir()
	roots := x509.NewCertPool()
	writeCert(t, dir, "default", roots, "localhost", "127.0.0.1")
	writeCert(t, dir, "other", roots, "other.test")
	s := startHaboob(t, tlsConfig(dir))
	addr := s.hb.TLSAddr().String()
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	old, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	before := old.ConnectionState().PeerCertificates[0].Raw

	writeCert(t, dir, "default", roots, "localhost", "127.0.0.1") // renewed
	if err := s.hb.ReloadCertificates(); err != nil {
		t.Fatal(err)
	}
	// The old connection still serves.
	if _, err := old.Write([]byte("GET /page.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = old.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := nethttp.ReadResponse(bufio.NewReader(old), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("old connection after reload: %v %v", resp, err)
	}
	// A new one gets the new certificate.
	fresh, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if string(fresh.ConnectionState().PeerCertificates[0].Raw) == string(before) {
		t.Fatal("a handshake after Reload got the old certificate")
	}
	// A broken file keeps the current certificate and says why.
	if err := os.WriteFile(filepath.Join(dir, "default.key"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.hb.ReloadCertificates(); err == nil {
		t.Fatal("Reload of a broken key succeeded")
	}
}

// TestHTTPSHandshakeFlood opens many TLS connections at once against a
// handshake stage with few workers and a short queue: every client either
// completes its handshake and gets its page, or is refused (its
// connection closed at once); none hangs, and the refusals are counted.
func TestHTTPSHandshakeFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 handshakes")
	}
	dir := t.TempDir()
	roots := x509.NewCertPool()
	writeCert(t, dir, "default", roots, "localhost", "127.0.0.1")
	writeCert(t, dir, "other", roots, "other.test")
	config := strings.Replace(tlsConfig(dir), "        addr: \"127.0.0.1:0\"\n",
		"        addr: \"127.0.0.1:0\"\n        stage: {workers: 4, queue: 16}\n", 1)
	s := startHaboob(t, config)
	addr := s.hb.TLSAddr().String()
	const clients = 1000
	var wg sync.WaitGroup
	var mu sync.Mutex
	served, refused := 0, 0
	sem := make(chan struct{}, 200) // at most 200 dialing at once (descriptors)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "localhost"})
			if err != nil {
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := c.Write([]byte("GET /page.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")); err != nil {
				t.Error(err)
				return
			}
			resp, err := nethttp.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("after a completed handshake: %v", err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			served++
			mu.Unlock()
		}()
	}
	wg.Wait()
	hs, err := aio.TLSHandshakes(s.m, aio.TLSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st := hs.Stats()
	if served+refused != clients || served == 0 {
		t.Fatalf("served %d, refused %d of %d", served, refused, clients)
	}
	if st.Handshakes != uint64(served) || st.Refused < uint64(refused) {
		t.Fatalf("stats %+v; served %d, refused %d", st, served, refused)
	}
	t.Logf("1,000 concurrent handshakes, 4 workers, queue 16: %d served, %d refused (%+v)", served, refused, st)
}
