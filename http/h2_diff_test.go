package http_test

import (
	"bytes"
	"io"
	"net"
	nethttp "net/http"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
)

// diffSite is the content both servers serve in the differential test.
var diffSite = map[string]struct {
	ctype string
	body  []byte
}{
	"/":          {"text/html; charset=utf-8", []byte("<html><body>index</body></html>\n")},
	"/big.bin":   {"application/octet-stream", sizedBody(300_000)},
	"/empty.txt": {"text/plain", []byte{}},
	"/frame.bin": {"application/octet-stream", sizedBody(16384)},
}

// ourDiffHandler serves diffSite on our server: 404 for the rest, POST
// echoes its body.
func ourDiffHandler(req *http.Request) {
	if req.Path == "/cookie" {
		_ = http.Respond(req, http.OK("text/plain", []byte(req.Header.Get("Cookie"))))
		return
	}
	if req.Method == "POST" {
		_ = http.Respond(req, http.OK("application/octet-stream", req.Body))
		return
	}
	p, ok := diffSite[req.Path]
	if !ok {
		_ = http.Respond(req, http.NotFound())
		return
	}
	_ = http.Respond(req, http.OK(p.ctype, p.body))
}

// netDiffHandler serves diffSite the same way on net/http.
func netDiffHandler(w nethttp.ResponseWriter, r *nethttp.Request) {
	if r.URL.Path == "/cookie" {
		body := r.Header.Get("Cookie")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = io.WriteString(w, body)
		return
	}
	if r.Method == "POST" {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
		return
	}
	p, ok := diffSite[path.Clean(r.URL.Path)] // ours cleans paths too
	status, ctype, body := 200, p.ctype, p.body
	if !ok {
		status, ctype, body = 404, "text/plain; charset=utf-8", []byte("404 Not Found\n")
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != "HEAD" {
		_, _ = w.Write(body)
	}
}

// TestH2DifferentialNetHTTP sends the same requests over HTTP/2 to our
// server and to net/http's HTTP/2 server serving the same content: the
// status, the headers that matter and the body bytes must agree.
func TestH2DifferentialNetHTTP(t *testing.T) {
	ours := startServer(t, http.ServerConfig{}, ourDiffHandler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protos nethttp.Protocols
	protos.SetUnencryptedHTTP2(true)
	ref := &nethttp.Server{Handler: nethttp.HandlerFunc(netDiffHandler), Protocols: &protos}
	go func() { _ = ref.Serve(ln) }()
	t.Cleanup(func() { _ = ref.Close() })

	client := h2test.Client(t)
	type result struct {
		proto, ctype, length string
		status               int
		body                 []byte
	}
	do := func(addr, method, path, body string) result {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := nethttp.NewRequest(method, "http://"+addr+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(&nethttp.Cookie{Name: "a", Value: "1"})
		req.AddCookie(&nethttp.Cookie{Name: "b", Value: "2"})
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s on %s: %v", method, path, addr, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return result{resp.Proto, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Length"), resp.StatusCode, b}
	}
	cases := []struct{ method, path, body string }{
		{"GET", "/", ""},
		{"GET", "/big.bin", ""},
		{"GET", "/empty.txt", ""},
		{"GET", "/frame.bin", ""},
		{"GET", "/missing", ""},
		{"GET", "/a/../big.bin", ""},
		{"GET", "/?q=1", ""},
		{"GET", "/cookie", ""},
		{"HEAD", "/big.bin", ""},
		{"HEAD", "/missing", ""},
		{"POST", "/echo", "hello, h2"},
		{"POST", "/echo", strings.Repeat("body ", 150_000)}, // over the stream window: WINDOW_UPDATEs
	}
	for _, tc := range cases {
		got := do(ours.addr, tc.method, tc.path, tc.body)
		want := do(ln.Addr().String(), tc.method, tc.path, tc.body)
		if got.proto != want.proto || got.status != want.status || got.ctype != want.ctype ||
			got.length != want.length || !bytes.Equal(got.body, want.body) {
			t.Errorf("%s %s: ours %s %d %q %q (%d bytes), net/http %s %d %q %q (%d bytes)", tc.method, tc.path,
				got.proto, got.status, got.ctype, got.length, len(got.body),
				want.proto, want.status, want.ctype, want.length, len(want.body))
		}
	}
}
