package haboob_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
)

// TestHTTPSInlineHitAllocations bounds the heap allocations of one
// keep-alive HTTPS request answered by the Combine path (TLS 1.3, HTTP/1.1),
// measured over the whole process, server and client, with
// testing.AllocsPerRun. What is left is crypto/tls's own: every record
// read that reaches its transport takes one small object (its
// atLeastReader): the client's read of the response and the server's of
// the request. Measured 2026-11-27: 8 per request (512 bytes) before, 2
// (48 bytes) after the server's record path stopped allocating: the
// event loop decrypts the ciphertext where it lies in gnet's buffer
// instead of copying it out first (aio's read); the plaintext is lent to
// http (aio.PacketBorrower, as on plain connections) instead of copied
// out of the record buffer; a sealed buffer goes back to its pool without
// a new *[]byte (aio's putCipherBuf); the records of a response are
// listed in a slice the session reuses (encryptLocked); and the server
// no longer reads again after the request's record to find nothing more
// (the transport hands crypto/tls one record at a time, so an empty
// transport means crypto/tls holds nothing: drainLocked stops). A change
// that adds one per request fails here.
func TestHTTPSInlineHitAllocations(t *testing.T) {
	s, roots := startHTTPSInlineHitSite(t)
	tests := []struct {
		path string
		max  float64
	}{
		{"/page.txt", 2}, // copied into the header's buffer, one record
		{"/mid.txt", 2},  // sealed with its header into one record
		{"/big.bin", 2},  // a file: read into the records (no sendfile over TLS)
	}
	for _, tc := range tests {
		c, req, buf := httpsInlineHitClient(t, s, roots, tc.path)
		// Under -race the record buffers' pools drop some (race_on_test.go).
		checkInlineHitAllocations(t, s, tc.path, c, req, buf, tc.max, !raceEnabled)
	}
}

// startHTTPSInlineHitSite is startInlineHitSite with an HTTPS listener;
// it returns the roots that trust its certificate.
func startHTTPSInlineHitSite(t testing.TB) (*site, *x509.CertPool) {
	dir := t.TempDir()
	roots := x509.NewCertPool()
	writeCert(t, dir, "default", roots, "localhost", "127.0.0.1")
	writeCert(t, dir, "other", roots, "other.test")
	config := withCombineSendfile(tlsConfig(dir), "1h")
	if !strings.Contains(config, "combine: true") || !strings.Contains(config, "tls:") {
		t.Fatalf("config lacks combine or tls:\n%s", config)
	}
	s := startHaboob(t, config)
	write(t, s.root+"/mid.txt", strings.Repeat("m", 3000))
	return s, roots
}

// httpsInlineHitClient is inlineHitClient over TLS 1.3 (HTTP/1.1 by ALPN).
func httpsInlineHitClient(t testing.TB, s *site, roots *x509.CertPool, path string) (net.Conn, []byte, []byte) {
	t.Helper()
	c, err := tls.Dial("tcp", s.hb.TLSAddr().String(), &tls.Config{RootCAs: roots, ServerName: "localhost",
		MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	req, buf := primeHitClient(t, c, path)
	return c, req, buf
}

// BenchmarkHTTPSInlineHit is BenchmarkInlineHit over TLS 1.3, one request
// per round trip: client and server in this process, so allocs/op and
// cpu-ns/op (the process's CPU time per request) count both.
func BenchmarkHTTPSInlineHit(b *testing.B) {
	s, roots := startHTTPSInlineHitSite(b)
	for _, path := range []string{"/page.txt", "/mid.txt", "/big.bin"} {
		b.Run(strings.TrimPrefix(path, "/"), func(b *testing.B) {
			c, req, buf := httpsInlineHitClient(b, s, roots, path)
			b.ReportAllocs()
			start := processCPU(b)
			b.ResetTimer()
			for range b.N {
				exchangeRaw(b, c, req, buf)
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
