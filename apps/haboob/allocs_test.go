package haboob_test

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"strings"
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
// (http.newRequest). What is left: the packet read and its event, the
// parsed request, the reply, the response header's buffer. A change that
// adds one per request fails here.
func TestInlineHitAllocations(t *testing.T) {
	s := startHaboob(t, combineSendfileConfig("1h"))
	write(t, filepath.Join(s.root, "mid.txt"), strings.Repeat("m", 3000))
	tests := []struct {
		path string
		max  float64
	}{
		{"/page.txt", 5}, // copied into the header's buffer
		{"/mid.txt", 5},  // written beside the header (writev)
		{"/big.bin", 5},  // sendfile
	}
	for _, tc := range tests {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		req := []byte("GET " + tc.path + " HTTP/1.1\r\nHost: x\r\n\r\n")
		// The first answer is a miss (cached); the second one's length is
		// every answer's (the Date field has a fixed width).
		resp := exchangeRaw(t, c, req, nil)
		resp = exchangeRaw(t, c, req, nil)
		buf := make([]byte, len(resp))
		before := s.inline(t)
		got := testing.AllocsPerRun(200, func() { exchangeRaw(t, c, req, buf) })
		if n := s.inline(t) - before; n < 200 {
			t.Fatalf("%s: %d requests answered inline, want every one", tc.path, n)
		}
		t.Logf("%s: %.1f allocations per request", tc.path, got)
		if got > tc.max {
			t.Errorf("%s: %.1f allocations per request, want at most %.0f", tc.path, got, tc.max)
		}
	}
}

// exchangeRaw writes req on c and reads one response: into buf, exactly
// its length, when buf is given; else up to the end of a body whose
// Content-Length it reads.
func exchangeRaw(t *testing.T, c net.Conn, req, buf []byte) []byte {
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
