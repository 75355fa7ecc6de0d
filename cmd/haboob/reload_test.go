package main

import (
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var dashboardRE = regexp.MustCompile(`msg="haboob: profiler dashboard" url=http://([^/\s]+)/`)

// startReloadable builds haboob and runs it from a configuration file of
// its own (config, free to rewrite), serving a site holding hello.txt,
// its profiler listening on profilerAddr ("" for none), its log lines
// read through w.
func startReloadable(t *testing.T, profilerAddr string) (r *running, w *logWatch, config string) {
	t.Helper()
	bin := buildHaboob(t)
	config = writeConfig(t, siteWith(t, "hello.txt", "hello\n"))
	r = start(t, bin, "-config", config, "-addr", "127.0.0.1:0", "-profiler", profilerAddr)
	return r, &logWatch{r: r}, config
}

// logWatch reads a running haboob's log lines as a test waits for them.
type logWatch struct {
	r    *running
	seen []string
}

// waitFor returns the first line from the start of the log that contains
// want, reading more lines as needed; the timeout only guards a hang.
func (w *logWatch) waitFor(t *testing.T, want string) string {
	t.Helper()
	for _, line := range w.seen {
		if strings.Contains(line, want) {
			return line
		}
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-w.r.logs:
			if !ok {
				t.Fatalf("haboob's log ended without %q:\n%s", want, strings.Join(w.seen, "\n"))
			}
			w.seen = append(w.seen, line)
			if strings.Contains(line, want) {
				return line
			}
		case <-timeout:
			t.Fatalf("no log line with %q in 30 s:\n%s", want, strings.Join(w.seen, "\n"))
		}
	}
}

// count returns how many lines read so far contain all of wants.
func (w *logWatch) count(wants ...string) int {
	n := 0
	for _, line := range w.seen {
		all := true
		for _, want := range wants {
			all = all && strings.Contains(line, want)
		}
		if all {
			n++
		}
	}
	return n
}

// TestBinaryReloadOnSIGHUP edits the -config file of a running haboob and
// sends SIGHUP: the change shows on the admin port's /config and in the
// logged summary, and a keep-alive connection opened before goes on
// serving; then a bad file is refused with every error logged at ERROR,
// and the server keeps serving with the configuration it had.
func TestBinaryReloadOnSIGHUP(t *testing.T) {
	r, w, config := startReloadable(t, "127.0.0.1:0")
	admin := dashboardRE.FindStringSubmatch(w.waitFor(t, "haboob: profiler dashboard"))[1]

	conn := dialHeld(t, r.addr) // stays open across the reloads
	if code, body := conn.keptAlive(t, "/hello.txt"); code != 200 || body != "hello\n" {
		t.Fatalf("GET /hello.txt: %d %q", code, body)
	}
	if _, cfg := get(t, "http://"+admin+"/config"); !strings.Contains(cfg, "threshold: 256") {
		t.Fatalf("/config before the reload has no Checksum threshold 256:\n%s", cfg)
	}

	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.NewReplacer(
		"queue: {threshold: 256}", "queue: {threshold: 300}",
		"batching: {max: 8}", "batching: {max: 4}",
	).Replace(string(data))
	if edited == string(data) {
		t.Fatal("configs/haboob.yaml changed: the test cannot edit Checksum's block")
	}
	replaceFile(t, config, edited)
	hangup(t, r)
	line := w.waitFor(t, `msg="configuration reloaded"`)
	t.Log(line)
	if !strings.Contains(line, `changes="changed Checksum (queue.threshold, batching)"`) {
		t.Errorf("reload summary: %s", line)
	}
	if _, cfg := get(t, "http://"+admin+"/config"); !strings.Contains(cfg, "threshold: 300") || strings.Contains(cfg, "threshold: 256") {
		t.Errorf("/config after the reload does not show Checksum's threshold 300:\n%s", cfg)
	}
	if code, body := conn.keptAlive(t, "/hello.txt"); code != 200 || body != "hello\n" {
		t.Fatalf("GET /hello.txt on the same connection after the reload: %d %q", code, body)
	}

	bad := strings.NewReplacer(
		"handler: haboob.Checksum", "handler: haboob.Chekcsum",
		"queue: {threshold: 300}", "queue: {threshold: 300, colour: red}",
	).Replace(edited)
	replaceFile(t, config, bad)
	hangup(t, r)
	w.waitFor(t, "stages.Checksum.queue.colour")
	w.waitFor(t, "stages.Checksum.handler")
	for _, l := range w.seen {
		if strings.Contains(l, "level=ERROR") {
			t.Log(l)
		}
	}
	if n := w.count("level=ERROR", "reload refused: the running configuration stays"); n != 2 {
		t.Errorf("%d ERROR lines for the refused reload, want 2 (one per error):\n%s", n, strings.Join(w.seen, "\n"))
	}
	if code, body := conn.keptAlive(t, "/hello.txt"); code != 200 || body != "hello\n" {
		t.Fatalf("GET /hello.txt on the same connection after the refused reload: %d %q", code, body)
	}
	if _, cfg := get(t, "http://"+admin+"/config"); !strings.Contains(cfg, "threshold: 300") {
		t.Errorf("/config after the refused reload lost the running configuration:\n%s", cfg)
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

// replaceFile replaces the file at path by a rename, as editors and
// deployment tools do, so that a reload never reads it half written.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func hangup(t *testing.T, r *running) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}
