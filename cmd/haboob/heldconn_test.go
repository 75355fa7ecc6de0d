package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// prlimitPath returns util-linux's prlimit, which runs haboob with few
// descriptors, and skips the test where it is not installed.
func prlimitPath(t *testing.T) string {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) not installed")
	}
	return prlimit
}

// writeHuge writes huge.bin in root, a sparse 256 MiB file: far more
// than the socket buffers hold.
func writeHuge(t *testing.T, root string) {
	t.Helper()
	f, err := os.Create(filepath.Join(root, "huge.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// heldConn is a client connection to haboob held open while the test
// makes trouble (reloads, descriptor exhaustion, shutdown), read through
// br.
type heldConn struct {
	net.Conn
	br *bufio.Reader
}

// dialHeld opens a held connection to addr, closed when the test ends.
func dialHeld(t *testing.T, addr string) *heldConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &heldConn{Conn: c, br: bufio.NewReader(c)}
}

// request asks for path on the held connection and returns the response
// with its body read; it fails t, saying what, if there is none. The
// deadline is a hang guard only.
func (h *heldConn) request(t *testing.T, what, path string) (*nethttp.Response, string) {
	t.Helper()
	_ = h.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := fmt.Fprintf(h, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		t.Fatalf("%s %s: %v", what, path, err)
	}
	resp, err := nethttp.ReadResponse(h.br, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", what, path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: %v", what, path, err)
	}
	return resp, string(body)
}

// ask asks for path on the held connection and fails t, saying what,
// unless the answer is a 200.
func (h *heldConn) ask(t *testing.T, what, path string) {
	t.Helper()
	if resp, _ := h.request(t, what, path); resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d", what, path, resp.StatusCode)
	}
}

// keptAlive asks for path on the held connection, failing t if the
// server closes the connection, and returns the status and body.
func (h *heldConn) keptAlive(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, body := h.request(t, "the kept-alive connection", path)
	if resp.Close {
		t.Fatal("the server closes the kept-alive connection")
	}
	return resp.StatusCode, body
}

// exhaustDescriptors opens connections to r until it logs that accept
// failed for want of descriptors, and returns a function closing them
// (also called when the test ends).
func exhaustDescriptors(t *testing.T, r *running) (closeAll func()) {
	t.Helper()
	var conns []net.Conn
	closeAll = func() {
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}
	t.Cleanup(closeAll)
	exhausted := false
	// A safety net only: the loop ends on the log line.
	for deadline := time.Now().Add(2 * time.Minute); !exhausted && time.Now().Before(deadline); {
		if len(conns) < 1000 {
			c, err := net.Dial("tcp", r.addr)
			if err != nil {
				t.Fatalf("dial %d: %v", len(conns), err)
			}
			conns = append(conns, c)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
		for more := true; more && !exhausted; { // every line logged so far
			select {
			case line, ok := <-r.logs:
				if !ok {
					t.Fatal("haboob exited")
				}
				exhausted = outOfDescriptors(line)
			default:
				more = false
			}
		}
	}
	if !exhausted {
		t.Fatalf("no accept failure logged after %d connections", len(conns))
	}
	return closeAll
}

// outOfDescriptors reports whether a log line says that the server ran
// out of descriptors: its accept(2) failed, or it accepted a connection
// and holds it until a descriptor is free for its event loop.
func outOfDescriptors(line string) bool {
	return strings.Contains(line, "too many open files") &&
		(strings.Contains(line, "aio: accept failed") || strings.Contains(line, "aio: no descriptor free to hand"))
}

// waitServingAgain gets url over new connections until it is answered
// with a 200; the bound is a safety net only.
func waitServingAgain(t *testing.T, url string) {
	t.Helper()
	tr := &nethttp.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &nethttp.Client{Transport: tr, Timeout: 10 * time.Second}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving again after the connections closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
