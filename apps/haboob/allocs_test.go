package haboob_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInlineHitAllocations bounds the heap allocations of one keep-alive
// request answered by the Combine path, measured over the whole process
// (server and client) with testing.AllocsPerRun: cached pages (a small
// one copied into the response's buffer, a larger one written beside it)
// and a file of the open-file cache (sendfile). The
// bound is the count measured on 2026-11-27 after the hit path's
// allocations were cut from 11 (page) and 12 (file): the principal's
// boxing, the Done calls' slice, the file reply's three objects, gnet's
// AsyncWrite hook and queue node (the loop writes itself), and (same day,
// to 5) the parsed request and its head's bytes made one object
// (http.newRequest), and (to 4) the response header formatted into the
// connection's buffer (http's headerBuffer) while no earlier write holds
// it, and (to 3) the reply made a value (http.Connection.Answer) pointing
// to the page's or open file's own 200 response, shared read-only, and
// (to 2) the packet handed to http by value (aio.PacketReceiver), not
// boxed into an event, and (to 1) the packet's bytes lent from the event
// loop's buffer (aio.PacketBorrower), copied only when they must wait,
// and (to 0) the parsed request's memory reused for the connection's next
// request once its inline answer is emitted (http.ServerConfig.RecycleInline).
// A change that adds one per request fails here.
func TestInlineHitAllocations(t *testing.T) {
	s := startInlineHitSite(t)
	tests := []struct {
		path string
		max  float64
	}{
		{"/page.txt", 0}, // copied into the header's buffer
		{"/mid.txt", 0},  // written beside the header (writev)
		{"/big.bin", 0},  // sendfile
	}
	for _, tc := range tests {
		c, req, buf := inlineHitClient(t, s, tc.path)
		checkInlineHitAllocations(t, s, tc.path, c, req, buf, tc.max, true)
	}
}

// checkInlineHitAllocations has c send req 200 times, each answered
// inline into buf, and fails if a request allocates more than max objects
// on average (when check is set; logged in any case).
func checkInlineHitAllocations(t *testing.T, s *site, path string, c net.Conn, req, buf []byte, max float64, check bool) {
	t.Helper()
	before := s.inline(t)
	got := testing.AllocsPerRun(200, func() { exchangeRaw(t, c, req, buf) })
	if n := s.inline(t) - before; n < 200 {
		t.Fatalf("%s: %d requests answered inline, want every one", path, n)
	}
	t.Logf("%s: %.1f allocations per request", path, got)
	if check && got > max {
		t.Errorf("%s: %.1f allocations per request, want at most %.0f", path, got, max)
	}
}

// TestInlineHitBytes bounds the bytes allocated per request answered by
// the Combine path, over the whole process, as runtime.MemStats counts
// them over 2,000 keep-alive requests (what drives the GC's pace). The
// bound is 64 bytes, for the process's background work: 0 measured on
// 2026-11-27 once the parsed request's memory (its head and fields in one
// 512-byte object, http.newRequest) is reused for the connection's next
// request (http.ServerConfig.RecycleInline; 512 bytes per request
// before, 560 before the packet's bytes (48) were lent by the event loop,
// aio.PacketBorrower, 784 before the reply became a value and the
// packet's event went, 1,680, 1,680 and 1,616 before that; 1 KiB per
// Request before it was sized by its head); the packet is handed to http by value
// (its boxed event was 48), the reply is a value pointing to the page's
// or open file's own response (176 bytes each before); the response header is formatted
// into the connection's buffer (http's headerBuffer; 352 to 896 bytes
// per response before). A Request not reused, a reply object, a packet
// event, packet bytes or a header buffer allocated per response, fails
// here.
func TestInlineHitBytes(t *testing.T) {
	s := startInlineHitSite(t)
	tests := []struct {
		path string
		max  float64
	}{
		{"/page.txt", 64}, // copied into the connection's header buffer
		{"/mid.txt", 64},  // written beside it, released when written
		{"/big.bin", 64},  // sendfile
	}
	const requests = 2000
	for _, tc := range tests {
		c, req, buf := inlineHitClient(t, s, tc.path)
		before := s.inline(t)
		var start, end runtime.MemStats
		runtime.ReadMemStats(&start)
		for range requests {
			exchangeRaw(t, c, req, buf)
		}
		runtime.ReadMemStats(&end)
		if n := s.inline(t) - before; n < requests {
			t.Fatalf("%s: %d requests answered inline, want every one", tc.path, n)
		}
		got := float64(end.TotalAlloc-start.TotalAlloc) / requests
		t.Logf("%s: %.0f bytes allocated per request", tc.path, got)
		if got > tc.max {
			t.Errorf("%s: %.0f bytes allocated per request, want at most %.0f", tc.path, got, tc.max)
		}
	}
}

// startInlineHitSite starts Haboob with Combine on, sendfile for files
// of 4 KiB and more, and a 3,000-byte mid.txt beside the test files: a
// small page (page.txt), a page written beside its header (mid.txt) and
// a file (big.bin).
func startInlineHitSite(t testing.TB) *site {
	s := startHaboob(t, combineSendfileConfig("1h"))
	write(t, filepath.Join(s.root, "mid.txt"), strings.Repeat("m", 3000))
	return s
}

// inlineHitClient opens a keep-alive connection to s and makes path's
// next requests hits: it returns the connection, the request and a buffer
// the length of every response to it (the Date field has a fixed width).
func inlineHitClient(t testing.TB, s *site, path string) (net.Conn, []byte, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	req, buf := primeHitClient(t, c, path)
	return c, req, buf
}

// primeHitClient makes path's next requests on c hits (the first is a
// miss that caches it) and returns the request and a buffer the length of
// every response to it (the Date field has a fixed width). c is closed
// when the test ends.
func primeHitClient(t testing.TB, c net.Conn, path string) ([]byte, []byte) {
	t.Helper()
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard only
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
	exchangeRaw(t, c, req, nil) // a miss: cached
	resp := exchangeRaw(t, c, req, nil)
	return req, make([]byte, len(resp))
}

// exchangeRaw writes req on c and reads one response: into buf, exactly
// its length, when buf is given; else up to the end of a body whose
// Content-Length it reads.
func exchangeRaw(t testing.TB, c net.Conn, req, buf []byte) []byte {
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	if buf != nil {
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	var got []byte
	tmp := make([]byte, 64<<10)
	for {
		n, err := c.Read(tmp)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tmp[:n]...)
		head, body, ok := bytes.Cut(got, []byte("\r\n\r\n"))
		if !ok {
			continue
		}
		i := bytes.Index(head, []byte("Content-Length: "))
		if i < 0 {
			t.Fatalf("no Content-Length in %q", head)
		}
		var length int
		for _, d := range head[i+len("Content-Length: "):] {
			if d < '0' || d > '9' {
				break
			}
			length = length*10 + int(d-'0')
		}
		if len(body) >= length {
			return got
		}
	}
}

// BenchmarkInlineHit is one keep-alive request answered by the Combine
// path (client and server in this process, over loopback): a page copied
// into the header's buffer, a page written beside it, a file sent with
// sendfile; one request per round trip (as wrk sends them) or 16
// pipelined. Unpipelined, its B/op is TestInlineHitBytes's figure;
// pipelined, the replies of one packet wait together to be written, so
// all but the first format into buffers of their own. cpu-ns/op is the process's
// CPU time (user and system, client included) per request, which counts
// the GC's background work.
func BenchmarkInlineHit(b *testing.B) {
	s := startInlineHitSite(b)
	for _, path := range []string{"/page.txt", "/mid.txt", "/big.bin"} {
		for _, pipelined := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/pipelined=%d", strings.TrimPrefix(path, "/"), pipelined), func(b *testing.B) {
				c, req, buf := inlineHitClient(b, s, path)
				reqs, bufs := bytes.Repeat(req, pipelined), make([]byte, pipelined*len(buf))
				b.ReportAllocs()
				start := processCPU(b)
				b.ResetTimer()
				for range (b.N + pipelined - 1) / pipelined {
					exchangeRaw(b, c, reqs, bufs)
				}
				b.StopTimer()
				b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
