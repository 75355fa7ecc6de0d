package haboob_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	nethttp "net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// poll calls cond every few milliseconds until it holds. The deadline is
// only a safety net far above what a loaded machine needs: the test
// decides on what cond observes, not on how long it took.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openFiles counts the process's descriptors open on path (0 where
// /proc/self/fd is missing).
func openFiles(path string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && l == path {
			n++
		}
	}
	return n
}

// TestNonReadersPipeliningLargeFilesShareOneDescriptor: clients that
// pipeline requests for a large file and never read hold no buffers and
// no descriptor of their own: every response sends the one descriptor of
// the open-file cache with sendfile, and what waits is counted as file
// bytes, not as output pending in memory. Once they go, nothing of theirs
// stays open but the cache's descriptor, and a client pipelining the same
// requests and reading gets every byte in order.
func TestNonReadersPipeliningLargeFilesShareOneDescriptor(t *testing.T) {
	const clients, depth = 12, 8
	root := t.TempDir()
	huge := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: more than a stalled connection's buffers
	path := filepath.Join(root, "huge.bin")
	if err := os.WriteFile(path, huge, 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := startLogged(t, testConfig, root, "")
	hs, err := s.hb.HTTP()
	if err != nil {
		t.Fatal(err)
	}
	req := strings.Repeat("GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n", depth)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range clients {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	// Every client's first response is being sent from the file and its
	// socket is full.
	poll(t, "a response to every client", func() bool { return hs.Stats().Responses >= clients })
	poll(t, "the sockets to fill", func() bool { return hs.Socket().Stats().FileWaits >= clients })
	st := hs.Socket().Stats()
	if st.FileBytes == 0 {
		t.Fatal("no bytes sent from the file")
	}
	if pending := st.OutputPending; pending > clients*(256<<10) {
		t.Errorf("%d bytes pending in memory for %d non-readers: more than a write window each", pending, clients)
	}
	if runtime.GOOS == "linux" {
		if n := openFiles(path); n != 1 {
			t.Errorf("%d descriptors open on the file, want the open-file cache's one", n)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	poll(t, "the non-readers to go", func() bool { return hs.Socket().Stats().Open == 0 })

	// A client that reads gets all its pipelined responses, in order.
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, strings.Repeat("GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n", 3)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 3 {
		resp, err := nethttp.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(body, huge) {
			t.Fatalf("response %d: %d, %d bytes (%v)", i, resp.StatusCode, len(body), err)
		}
	}
	if runtime.GOOS == "linux" {
		if n := openFiles(path); n != 1 {
			t.Errorf("%d descriptors open on the file after the reader, want the cache's one", n)
		}
	}
}
