package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	nethttp "net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestBinaryOtelStdout: with -otel stdout, a request carrying a W3C
// traceparent is traced through Haboob's stages in the caller's trace:
// the spans on stdout have its trace ID, and HttpRecv's parent is the
// caller's span.
func TestBinaryOtelStdout(t *testing.T) {
	bin := buildHaboob(t)
	root := siteWith(t, "a.txt", "aaaa\n")
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-root", root, "-profiler", "", "-otel", "stdout")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := readyRE.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[1]
			}
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case <-time.After(30 * time.Second): // hang guard
		t.Fatal("haboob did not report ready")
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := nethttp.NewRequest("GET", "http://"+addr+"/a.txt", nil)
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	tr := &nethttp.Transport{}
	resp, err := (&nethttp.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tr.CloseIdleConnections()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	type spanContext struct{ TraceID, SpanID string }
	names := map[string]bool{}
	dec := json.NewDecoder(&stdout)
	for dec.More() {
		var span struct {
			Name                string
			SpanContext, Parent spanContext
		}
		if err := dec.Decode(&span); err != nil {
			t.Fatalf("stdout is not JSON spans: %v\n%s", err, stdout.String())
		}
		if span.SpanContext.TraceID != traceID {
			t.Errorf("span %s in trace %s, want the caller's %s", span.Name, span.SpanContext.TraceID, traceID)
		}
		if span.Name == "HttpRecv" && span.Parent.SpanID != parentID {
			t.Errorf("HttpRecv's parent %s, want the caller's span %s", span.Parent.SpanID, parentID)
		}
		names[span.Name] = true
	}
	if !names["HttpRecv"] || len(names) < 2 {
		t.Fatalf("spans %v, want HttpRecv and the stages after it", names)
	}
}

// TestOtelFlag: -otel takes off or stdout; anything else is a usage error.
func TestOtelFlag(t *testing.T) {
	tests := []struct {
		mode string
		ok   bool
	}{{"off", true}, {"", true}, {"stdout", true}, {"jaeger", false}}
	for _, tt := range tests {
		tr, err := newTracing(tt.mode, &bytes.Buffer{})
		if (err == nil) != tt.ok {
			t.Errorf("-otel %q: err %v", tt.mode, err)
		}
		if err == nil && (tr.tp != nil) != (tt.mode == "stdout") {
			t.Errorf("-otel %q: tracing on %v", tt.mode, tr.tp != nil)
		}
	}
	if code := run([]string{"-otel", "jaeger"}); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
}
