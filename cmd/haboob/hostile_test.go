package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBinaryConfigWithoutHttpRecv: a configuration with no HttpRecv stage
// is a clear error, not a panic.
func TestBinaryConfigWithoutHttpRecv(t *testing.T) {
	bin := buildHaboob(t)
	for _, text := range []string{"", "global: {}\n", "stages: {}\n", "global: {}\nstages: {}\n"} {
		path := filepath.Join(t.TempDir(), "haboob.yaml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "-config", path, "-addr", "127.0.0.1:0", "-profiler", "").CombinedOutput()
		var exit *exec.ExitError
		if !asExit(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("config %q: %v, want exit 1\n%s", text, err, out)
		}
		if s := string(out); strings.Contains(s, "panic") || !strings.Contains(s, path+": no stage has handler haboob.HttpRecv") {
			t.Errorf("config %q: unclear error:\n%s", text, out)
		}
	}
}

func asExit(err error, exit **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*exit = e
	return ok
}

// TestBinaryProfilerPortInUse: a profiler dashboard that cannot listen is
// a start-up error (exit 1), not a log line under a running server.
func TestBinaryProfilerPortInUse(t *testing.T) {
	bin := buildHaboob(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-root", t.TempDir(), "-profiler", busy.Addr().String())
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("haboob kept running with its profiler port in use:\n%s", out)
	}
	var exit *exec.ExitError
	if !asExit(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("%v, want exit 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "profiler not started") || !strings.Contains(string(out), "address already in use") {
		t.Fatalf("unclear error:\n%s", out)
	}
}

// TestBinaryRecoversFromDescriptorExhaustion runs haboob under
// `prlimit --nofile=512`, opens connections until its accept fails for
// want of descriptors, checks that a connection it holds is still served,
// closes them all and checks that it serves new connections again.
func TestBinaryRecoversFromDescriptorExhaustion(t *testing.T) {
	prlimit := prlimitPath(t)
	bin := buildHaboob(t)
	root := siteWith(t, "index.html", "home")
	r := start(t, prlimit, "--nofile=512", bin, "-config", writeConfig(t, ""), "-root", root, "-addr", "127.0.0.1:0", "-profiler", "")
	url := "http://" + r.addr + "/index.html"
	if code, body := get(t, url); code != 200 || body != "home" {
		t.Fatalf("before: %d %q", code, body)
	}
	// A keep-alive connection opened before the exhaustion, its page cached.
	held := dialHeld(t, r.addr)
	held.ask(t, "held connection before", "/index.html")

	closeAll := exhaustDescriptors(t, r)
	held.ask(t, "held connection while out of descriptors", "/index.html")
	closeAll()

	// Serves again: poll with new connections, within a generous bound.
	waitServingAgain(t, url)
	held.Close()
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	var recovered bool
	for line := range r.logs {
		if strings.Contains(line, "aio: accepting again") || strings.Contains(line, "aio: accepted connection handed over once a descriptor was free") {
			recovered = true
		}
		if strings.Contains(line, "stopped unexpectedly") {
			t.Errorf("listener died: %s", line)
		}
	}
	if !recovered {
		t.Error("no recovery logged")
	}
}
