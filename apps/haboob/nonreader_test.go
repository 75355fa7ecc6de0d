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

	"github.com/sandstorm-go/sandstorm/aio"
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

// TestNonReadersPipeliningLargeFilesHoldOneFileEach: clients that
// pipeline requests for a large (streamed) file and never read hold one
// open file each, not one per request: a connection's transfers open
// their file in turn. Once they go, their files are closed, and a client
// pipelining the same requests and reading gets every byte in order.
func TestNonReadersPipeliningLargeFilesHoldOneFileEach(t *testing.T) {
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
	fio, err := aio.Files(s.m)
	if err != nil {
		t.Fatal(err)
	}
	miss, ok := s.m.Stage("CacheMiss")
	if !ok {
		t.Fatal("no CacheMiss stage")
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
	// Every request has reached CacheMiss and every file request it
	// caused has completed: with a file per request, all of them would
	// be open now.
	poll(t, "CacheMiss to handle every request", func() bool {
		return hs.Stats().Requests >= clients*depth && miss.Stats().Events >= clients*depth
	})
	poll(t, "the file requests to complete", func() bool {
		st := fio.Stats()
		return st.Requests == st.Completed+st.Errors+st.Lost && st.Open >= clients
	})
	limit := 2 * clients // one each, and the next's open racing the last close
	if st := fio.Stats(); st.Open > limit {
		t.Errorf("%d clients pipelining %d requests hold %d open files, want at most %d", clients, depth, st.Open, limit)
	}
	if runtime.GOOS == "linux" {
		if n := openFiles(path); n > limit {
			t.Errorf("%d descriptors open on the file, want at most %d", n, limit)
		}
	}

	for _, c := range conns {
		c.Close()
	}
	conns = nil
	poll(t, "the non-readers' files to close", func() bool { return fio.Stats().Open == 0 })

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
	poll(t, "the reader's files to close", func() bool { return fio.Stats().Open == 0 })
}
