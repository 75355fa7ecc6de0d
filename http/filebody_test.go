package http_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
)

// fileFixture is a file on disk that a handler answers from with file
// bodies, counting the references it hands out so that a test can see
// every one given back.
type fileFixture struct {
	data []byte
	file *aio.SharedFile
}

func newFileFixture(t *testing.T, size int) *fileFixture {
	t.Helper()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	name := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	return &fileFixture{data: data, file: aio.NewSharedFile(f)}
}

// handle answers GET/HEAD /full with the whole file, /range/a-b with
// bytes a..b (206), /cond with a 304 that still carries a file body (it
// must be released unsent), anything else with a short text.
func (ff *fileFixture) handle(req *http.Request) {
	var resp *http.Response
	size := int64(len(ff.data))
	switch {
	case req.Path == "/full":
		resp = http.NewFileBodyResponse(http.StatusOK, "application/octet-stream", ff.file.Retain(), 0, size)
	case strings.HasPrefix(req.Path, "/range/"):
		a, b, _ := strings.Cut(strings.TrimPrefix(req.Path, "/range/"), "-")
		first, _ := strconv.ParseInt(a, 10, 64)
		last, _ := strconv.ParseInt(b, 10, 64)
		resp = http.PartialContent("application/octet-stream", first, last, size, nil)
		resp.File = &http.FileBody{File: ff.file.Retain(), Offset: first, Length: last - first + 1}
	case req.Path == "/cond":
		resp = http.NotModified()
		resp.File = &http.FileBody{File: ff.file.Retain(), Offset: 0, Length: 0}
	default:
		resp = http.OK("text/plain", []byte("small "+req.Path))
	}
	_ = http.Respond(req, resp)
}

// waitReleased waits until only the fixture's own reference is left.
func (ff *fileFixture) waitReleased(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // hang guard
	for ff.file.Refs() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d references to the file not released", ff.file.Refs()-1)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// File bodies over a real socket: a file far larger than the socket
// buffers arrives byte-exact; pipelined GET, HEAD, Range and 304 answers
// (with small in-memory answers between them) come back in order, each
// body right after its own header; every reference is released.
func TestFileBodyPipelined(t *testing.T) {
	ff := newFileFixture(t, 8<<20+3)
	f := startServer(t, http.ServerConfig{}, ff.handle)
	conn, br := f.dial(t)
	tests := []struct {
		method, path string
		status       int
		body         []byte
	}{
		{"GET", "/full", 200, ff.data},
		{"GET", "/a", 200, []byte("small /a")},
		{"HEAD", "/full", 200, nil},
		{"GET", "/range/100-4099", 206, ff.data[100:4100]},
		{"GET", "/cond", 304, nil},
		{"GET", "/range/0-0", 206, ff.data[:1]},
		{"GET", "/full", 200, ff.data},
		{"GET", "/b", 200, []byte("small /b")},
	}
	var reqs bytes.Buffer
	for _, tc := range tests {
		fmt.Fprintf(&reqs, "%s %s HTTP/1.1\r\nHost: x\r\n\r\n", tc.method, tc.path)
	}
	go func() { _, _ = conn.Write(reqs.Bytes()) }()
	for i, tc := range tests {
		resp, body := readResponse(t, br, tc.method)
		if resp.StatusCode != tc.status {
			t.Fatalf("%d %s %s: status %d, want %d", i, tc.method, tc.path, resp.StatusCode, tc.status)
		}
		if !bytes.Equal([]byte(body), tc.body) {
			t.Fatalf("%d %s %s: body of %d bytes differs from the %d wanted", i, tc.method, tc.path, len(body), len(tc.body))
		}
		if tc.method == "HEAD" && resp.ContentLength != int64(len(ff.data)) {
			t.Fatalf("HEAD Content-Length %d, want %d", resp.ContentLength, len(ff.data))
		}
	}
	ff.waitReleased(t)
}

// A client that asks for a large file and disconnects without reading
// gets its reference released (the descriptor is not leaked).
func TestFileBodyReleasedOnDisconnect(t *testing.T) {
	ff := newFileFixture(t, 32<<20)
	f := startServer(t, http.ServerConfig{}, ff.handle)
	conn, _ := f.dial(t)
	if _, err := io.WriteString(conn, "GET /full HTTP/1.1\r\nHost: x\r\n\r\nGET /full HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second) // hang guard
	for f.srv.Stats().Responses == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no response started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	conn.Close()
	ff.waitReleased(t)
}

// On a TLS connection a file body is read into memory and encrypted: the
// same pipelined answers arrive byte-exact over TLS, and every reference
// is released.
func TestFileBodyOverTLS(t *testing.T) {
	store, clientTLS := selfSignedTLS(t)
	ff := newFileFixture(t, 3<<20+5)
	f := startServer(t, http.ServerConfig{Socket: aio.SocketConfig{TLS: &aio.TLSConfig{Store: store}}}, ff.handle)
	conn, err := tls.Dial("tcp", f.addr, clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute)) // hang guard
	tests := []struct {
		method, path string
		status       int
		body         []byte
	}{
		{"GET", "/full", 200, ff.data},
		{"HEAD", "/full", 200, nil},
		{"GET", "/range/7-70006", 206, ff.data[7:70007]},
		{"GET", "/cond", 304, nil},
		{"GET", "/a", 200, []byte("small /a")},
	}
	var reqs bytes.Buffer
	for _, tc := range tests {
		fmt.Fprintf(&reqs, "%s %s HTTP/1.1\r\nHost: x\r\n\r\n", tc.method, tc.path)
	}
	if _, err := conn.Write(reqs.Bytes()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i, tc := range tests {
		resp, body := readResponse(t, br, tc.method)
		if resp.StatusCode != tc.status || !bytes.Equal([]byte(body), tc.body) {
			t.Fatalf("%d %s %s: %d with %d bytes, want %d with %d", i, tc.method, tc.path, resp.StatusCode, len(body), tc.status, len(tc.body))
		}
	}
	ff.waitReleased(t)
	if st := f.srv.Socket().Stats(); st.FileBytes != 0 {
		t.Fatalf("%d bytes sent from the file on a TLS connection", st.FileBytes)
	}
}
