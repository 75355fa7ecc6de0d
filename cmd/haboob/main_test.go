package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	nethttp "net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/configs"
)

// built is the command compiled once for the package's tests (go build
// links it anew each time: seconds per test), in a directory TestMain
// removes.
var built struct {
	once     sync.Once
	dir, bin string
	out      []byte
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildHaboob returns the command compiled into a temporary directory
// (once: the tests share the binary and never change it).
func buildHaboob(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "haboob-test-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "haboob")
		built.out, built.err = exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	return built.bin
}

type running struct {
	cmd  *exec.Cmd
	addr string
	logs chan string   // stderr lines after "ready"
	read chan struct{} // closed once stderr reached its end
	root string        // the extracted bundled site, if any
}

var (
	readyRE   = regexp.MustCompile(`msg="haboob: ready" addr=(\S+)`)
	bundledRE = regexp.MustCompile(`msg="haboob: serving the bundled site" root=(\S+)`)
)

// start runs the binary and waits for its "ready" log line.
func start(t *testing.T, bin string, args ...string) *running {
	t.Helper()
	r := &running{cmd: exec.Command(bin, args...), logs: make(chan string, 1024), read: make(chan struct{})}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
	})
	ready := make(chan string, 1)
	q := newLineQueue()
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if m := bundledRE.FindStringSubmatch(line); m != nil {
				r.root = m[1]
			}
			if m := readyRE.FindStringSubmatch(line); m != nil {
				ready <- m[1]
			}
			q.push(line)
		}
		q.end()
		close(r.read)
	}()
	// Every line reaches r.logs, however long the test leaves them
	// unread (a check for ERROR lines must not miss a dropped one); the
	// forwarder stops with the test.
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go q.forward(r.logs, stop)
	select {
	case r.addr = <-ready:
	case <-r.read:
		select {
		case r.addr = <-ready: // ready, then gone: the test will see
		default:
			// It exited (a port taken, a bad flag): say what it printed.
			t.Fatalf("haboob %v exited before it was ready:\n%s", args, r.drainLogs())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("haboob %v did not report ready:\n%s", args, r.drainLogs())
	}
	return r
}

// drainLogs returns the log lines not yet read from r.logs: all of them
// if the process's stderr has ended, else those that arrived so far.
func (r *running) drainLogs() string {
	var b strings.Builder
	idle := time.After(100 * time.Millisecond)
	for {
		select {
		case line, ok := <-r.logs:
			if !ok {
				return b.String()
			}
			b.WriteString(line + "\n")
		case <-idle:
			select {
			case <-r.read:
				// Ended: the forwarder closes r.logs once it has passed
				// on the rest.
				for line := range r.logs {
					b.WriteString(line + "\n")
				}
			default:
			}
			return b.String()
		}
	}
}

// lineQueue holds a process's log lines between the goroutine reading
// its stderr and the one passing them to the test, without a bound: no
// line is dropped.
type lineQueue struct {
	mu    sync.Mutex
	lines []string
	ended bool
	more  chan struct{} // a token when lines arrive or stderr ends
}

func newLineQueue() *lineQueue { return &lineQueue{more: make(chan struct{}, 1)} }

func (q *lineQueue) push(line string) {
	q.mu.Lock()
	q.lines = append(q.lines, line)
	q.mu.Unlock()
	q.wake()
}

func (q *lineQueue) end() {
	q.mu.Lock()
	q.ended = true
	q.mu.Unlock()
	q.wake()
}

func (q *lineQueue) wake() {
	select {
	case q.more <- struct{}{}:
	default:
	}
}

// forward sends the lines to out in order and closes it after the last
// one once stderr has ended; it returns early when stop is closed.
func (q *lineQueue) forward(out chan<- string, stop <-chan struct{}) {
	for {
		q.mu.Lock()
		lines, ended := q.lines, q.ended
		q.lines = nil
		q.mu.Unlock()
		for _, line := range lines {
			select {
			case out <- line:
			case <-stop:
				return
			}
		}
		if len(lines) > 0 {
			continue
		}
		if ended {
			close(out)
			return
		}
		select {
		case <-q.more:
		case <-stop:
			return
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	tr := &nethttp.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&nethttp.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// stop sends SIGINT and returns the exit code.
func (r *running) stop(t *testing.T) int {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// Wait closes stderr once the process has exited: read it to its end
	// first, or the last log lines may be lost.
	select {
	case <-r.read:
	case <-time.After(30 * time.Second):
		t.Fatal("haboob did not exit after SIGINT")
	}
	if err := r.cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatal(err)
		}
	}
	return r.cmd.ProcessState.ExitCode()
}

func TestBinaryServesRootAndStopsOnSIGINT(t *testing.T) {
	bin := buildHaboob(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from disk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := start(t, bin, "-addr", "127.0.0.1:0", "-root", root, "-profiler", "")
	if code, body := get(t, "http://"+r.addr+"/hello.txt"); code != 200 || body != "hello from disk\n" {
		t.Fatalf("GET /hello.txt: %d %q", code, body)
	}
	if code, _ := get(t, "http://"+r.addr+"/nope"); code != 404 {
		t.Fatalf("GET /nope: %d", code)
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	var sawStopped bool
	for line := range r.logs {
		sawStopped = sawStopped || strings.Contains(line, `msg="haboob: stopped"`)
	}
	if !sawStopped {
		t.Fatal(`no "haboob: stopped" log line`)
	}
}

func TestBinaryBundledSite(t *testing.T) {
	bin := buildHaboob(t)
	r := start(t, bin, "-addr", "127.0.0.1:0", "-profiler", "")
	for _, p := range []string{"/", "/about.html", "/style.css", "/img/haboob.png", "/docs/"} {
		if code, _ := get(t, "http://"+r.addr+p); code != 200 {
			t.Errorf("GET %s: %d", p, code)
		}
	}
	if code, body := get(t, "http://"+r.addr+"/"); code != 200 || !strings.Contains(body, "Haboob") {
		t.Fatalf("GET /: %d %q", code, body)
	}
	if r.root == "" {
		t.Fatal("bundled site directory not logged")
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if _, err := os.Stat(r.root); !os.IsNotExist(err) {
		t.Fatalf("bundled site %s not removed at exit (%v)", r.root, err)
	}
}

func TestBinaryBadFlagsAndConfig(t *testing.T) {
	bin := buildHaboob(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("stages:\n  X: {handler: nope.Nope}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-nosuchflag"}, {"-config", bad}, {"-root", "/does/not/exist", "-addr", "127.0.0.1:0", "-profiler", ""}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err == nil {
			t.Errorf("%v: exit 0\n%s", args, out)
		}
	}
}

// writeConfig writes the embedded configuration with CacheMiss's root set
// to root ("" keeps it empty) and a 2 s shutdown bound.
func writeConfig(t *testing.T, root string) string {
	t.Helper()
	text := strings.NewReplacer(
		`root: ""`, fmt.Sprintf("root: %q", root),
		"shutdown: 10s", "shutdown: 2s",
	).Replace(string(configs.Haboob))
	if !strings.Contains(text, "shutdown: 2s") || root != "" && !strings.Contains(text, root) {
		t.Fatal("configs/haboob.yaml changed: the test cannot set its root and shutdown")
	}
	path := filepath.Join(t.TempDir(), "haboob.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func siteWith(t *testing.T, name, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestBinaryConfigRootAndFlagOverride(t *testing.T) {
	bin := buildHaboob(t)
	fromConfig := siteWith(t, "which.txt", "config root\n")
	fromFlag := siteWith(t, "which.txt", "flag root\n")
	config := writeConfig(t, fromConfig)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-config", config}, "config root\n"},
		{[]string{"-config", config, "-root", fromFlag}, "flag root\n"},
	} {
		r := start(t, bin, append(tt.args, "-addr", "127.0.0.1:0", "-profiler", "")...)
		if code, body := get(t, "http://"+r.addr+"/which.txt"); code != 200 || body != tt.want {
			t.Errorf("%v: GET /which.txt: %d %q, want %q", tt.args, code, body, tt.want)
		}
		if r.root != "" {
			t.Errorf("%v: served the bundled site although a root was set", tt.args)
		}
		if code := r.stop(t); code != 0 {
			t.Fatalf("%v: exit code %d", tt.args, code)
		}
	}
}

func TestBinaryShutdownWithPartialRequest(t *testing.T) {
	bin := buildHaboob(t)
	root := siteWith(t, "hello.txt", "hello\n")
	r := start(t, bin, "-config", writeConfig(t, ""), "-root", root, "-addr", "127.0.0.1:0", "-profiler", "")
	c := dialHeld(t, r.addr)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	// A request answered, then one only half sent, in one packet: the
	// server holds the half request when the first answer arrives.
	fmt.Fprint(c, "GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: x\r\n")
	resp, err := nethttp.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGINT with a half-sent request", code)
	}
	if rest, err := io.ReadAll(c.br); err != nil || len(rest) > 0 {
		t.Fatalf("half-sent request: read %q, %v; want a clean close", rest, err)
	}
}

func TestBinaryShutdownWithNonReadingClient(t *testing.T) {
	bin := buildHaboob(t)
	root := t.TempDir()
	writeHuge(t, root)
	r := start(t, bin, "-config", writeConfig(t, ""), "-root", root, "-addr", "127.0.0.1:0", "-profiler", "")
	c := dialHeld(t, r.addr)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprint(c, "GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n")
	// Read the status line, then stop reading.
	if line, err := c.br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("status line %q, %v", line, err)
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGINT with a client that does not read", code)
	}
	var forced bool
	for line := range r.logs {
		forced = forced || strings.Contains(line, "closing connections that did not finish") && strings.Contains(line, "count=1")
	}
	if !forced {
		t.Fatal("the forced close of the stuck connection was not logged")
	}
}
