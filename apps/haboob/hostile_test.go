package haboob_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	nethttp "net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/internal/logbuf"
	"github.com/sandstorm-go/sandstorm/stage"
)

// startLogged starts Haboob on config with root prepared by the caller,
// its logs (Haboob's and the manager's) going to the returned buffer.
func startLogged(t *testing.T, config, root, addr string) (*site, *logbuf.Buffer) {
	t.Helper()
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return startSite(t, config, haboob.Options{Root: root, Logger: log, Addr: addr}, nil), logs
}

// TestClientChosenPathsNotFound: paths the file system refuses because of
// what the client asked for (a file used as a directory, a name too long,
// a symbolic-link loop, a file named with a trailing slash) are 404, as
// nginx answers (nginx: 403 for the loop), and log no error.
func TestClientChosenPathsNotFound(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "small.txt"), "small")
	for _, l := range [][2]string{{"loop2", "loop1"}, {"loop1", "loop2"}, {"self", "self"}} {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	s, logs := startLogged(t, testConfig, root, "")
	long := strings.Repeat("a", 300)
	for _, p := range []string{
		"/small.txt/x", "/small.txt/", "/small.txt/x/y",
		"/" + long, "/dir/" + long + "/x", "/small.txt/" + long,
		"/loop1", "/loop1/x", "/self", "/self/",
	} {
		if code, body := s.raw(t, p); code != 404 {
			t.Errorf("GET %.40s: %d %q, want 404", p, code, body)
		}
	}
	if code, body := s.raw(t, "/small.txt"); code != 200 || body != "small" {
		t.Fatalf("GET /small.txt: %d %q", code, body)
	}
	if out := logs.String(); strings.Contains(out, "level=ERROR") {
		t.Errorf("client-chosen paths logged errors:\n%s", out)
	}
}

// TestStatsPageLoopbackOnly: by default the statistics page answers
// loopback clients only; statsAccess: public opens it. The other client
// comes from a non-loopback address of this machine (skipped if it has
// none).
func TestStatsPageLoopbackOnly(t *testing.T) {
	var ext net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			ext = n.IP
			break
		}
	}
	get := func(t *testing.T, s *site, host string) int {
		t.Helper()
		_, port, _ := net.SplitHostPort(s.addr)
		c := &nethttp.Client{Timeout: 10 * time.Second}
		resp, err := c.Get("http://" + net.JoinHostPort(host, port) + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct {
		access          string
		local, external int
	}{
		{"", 200, 403},
		{"statsAccess: loopback", 200, 403},
		{"statsAccess: public", 200, 200},
	} {
		t.Run(tt.access, func(t *testing.T) {
			cfg := strings.Replace(testConfig, "routes: {/checksum/: Checksum, /busy/: Busy}",
				"routes: {/checksum/: Checksum, /busy/: Busy}\n      "+tt.access, 1)
			s, _ := startLogged(t, cfg, t.TempDir(), "0.0.0.0:0")
			if got := get(t, s, "127.0.0.1"); got != tt.local {
				t.Errorf("from 127.0.0.1: %d, want %d", got, tt.local)
			}
			if ext == nil {
				t.Skip("no non-loopback IPv4 address on this machine")
			}
			if got := get(t, s, ext.String()); got != tt.external {
				t.Errorf("from %v: %d, want %d", ext, got, tt.external)
			}
		})
	}
}

func TestStatsAccessInvalid(t *testing.T) {
	cfg := strings.Replace(testConfig, "routes: {/checksum/: Checksum, /busy/: Busy}",
		"routes: {/checksum/: Checksum, /busy/: Busy}\n      statsAccess: everyone", 1)
	hb := haboob.New(haboob.Options{Root: t.TempDir()})
	reg := stage.NewRegistry()
	hb.Register(reg)
	m, err := stage.Parse([]byte(cfg), reg)
	if err == nil {
		err = m.Start(context.Background())
		defer hb.Close()
		defer m.Shutdown(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), "statsAccess") {
		t.Fatalf("statsAccess: everyone: %v", err)
	}
}

// TestMaxConnectionsRefusedAtAccept: HttpRecv's maxConnections answers a
// few connections over the limit 503 and closes the others as soon as they
// are accepted, so idle clients over the limit cannot pile up descriptors.
func TestMaxConnectionsRefusedAtAccept(t *testing.T) {
	cfg := strings.Replace(testConfig, "routes: {/checksum/: Checksum, /busy/: Busy}",
		"routes: {/checksum/: Checksum, /busy/: Busy}\n      maxConnections: 2\n      idleTimeout: 1h", 1)
	root := t.TempDir()
	write(t, filepath.Join(root, "index.html"), "home")
	s, _ := startLogged(t, cfg, root, "")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// 2 served + 16 answered 503 on their first request; the rest are
	// closed at accept.
	for i := range 2 + 16 + 10 {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			if i < 18 {
				t.Fatal(err)
			}
			continue // refused so fast that the dial saw the reset
		}
		conns = append(conns, c)
	}
	hs, err := s.hb.HTTP()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	// Every dial is accepted once: enrolled (Accepted, once its event loop
	// ran OnOpen) or refused over the limit.
	for st := hs.Socket().Stats(); st.Accepted+st.OverLimit < 28; st = hs.Socket().Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("socket stats %+v", hs.Socket().Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := hs.Socket().Stats()
	if st.Accepted != 18 || st.OverLimit != 10 {
		t.Fatalf("socket stats %+v", st)
	}
}

// TestOutOfDescriptorsAnswers503: while the process has no descriptor
// left, a page that is not cached (its file cannot be opened) gets 503
// with Retry-After on a connection already open, not 500 and an ERROR
// log; cached pages are still served, and the page is served once
// descriptors are free again.
func TestOutOfDescriptorsAnswers503(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc/self/fd and RLIMIT_NOFILE semantics of Linux")
	}
	root := t.TempDir()
	write(t, filepath.Join(root, "cached.html"), "cached")
	write(t, filepath.Join(root, "cold.html"), "cold")
	s, logs := startLogged(t, testConfig, root, "")
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func(path string) (int, string) {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		resp, err := nethttp.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After") + string(body)
	}
	if code, body := get("/cached.html"); code != 200 || body != "cached" {
		t.Fatalf("cached page: %d %q", code, body)
	}

	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Skip(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	hi := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > hi {
			hi = n
		}
	}
	low := orig
	low.Cur = uint64(hi + 32)
	if low.Cur >= orig.Cur {
		t.Skip("descriptor limit too low to lower")
	}
	var fillers []*os.File
	restore := func() {
		for _, f := range fillers {
			f.Close()
		}
		fillers = nil
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig)
	}
	defer restore()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		fillers = append(fillers, f)
	}
	code, body := get("/cold.html")
	cached, cbody := get("/cached.html")
	restore()
	if code != 503 || !strings.HasPrefix(body, "1") {
		t.Errorf("uncached page out of descriptors: %d, Retry-After+body %q; want 503 with Retry-After 1", code, body)
	}
	if cached != 200 || cbody != "cached" {
		t.Errorf("cached page out of descriptors: %d %q", cached, cbody)
	}
	if code, body := get("/cold.html"); code != 200 || body != "cold" {
		t.Errorf("after: %d %q", code, body)
	}
	if out := logs.String(); strings.Contains(out, "level=ERROR") {
		t.Errorf("descriptor shortage logged errors:\n%s", out)
	}
}
