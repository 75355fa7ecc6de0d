package main

import (
	"bufio"
	"io"
	nethttp "net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildHaboob compiles the command into a temporary directory.
func buildHaboob(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "haboob")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type running struct {
	cmd    *exec.Cmd
	addr   string
	logs   chan string // stderr lines after "ready"
	root   string      // the extracted bundled site, if any
	stderr strings.Builder
}

var (
	readyRE   = regexp.MustCompile(`msg="haboob: ready" addr=(\S+)`)
	bundledRE = regexp.MustCompile(`msg="haboob: serving the bundled site" root=(\S+)`)
)

// start runs the binary and waits for its "ready" log line.
func start(t *testing.T, bin string, args ...string) *running {
	t.Helper()
	r := &running{cmd: exec.Command(bin, args...), logs: make(chan string, 1024)}
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
			select {
			case r.logs <- line:
			default:
			}
		}
		close(r.logs)
	}()
	select {
	case r.addr = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("haboob did not report ready")
	}
	return r
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
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("haboob did not exit after SIGINT")
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
