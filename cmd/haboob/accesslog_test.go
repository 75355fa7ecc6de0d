package main

import (
	"crypto/tls"
	"fmt"
	"io"
	nethttp "net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	httpsRE    = regexp.MustCompile(`msg="haboob: ready" addr=\S+ https=(\S+)`)
	combinedRE = regexp.MustCompile(`^(\S+) - - \[[^\]]+\] "((?:[^"\\]|\\.)*)" (\d{3}) (\d+|-) "((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)"$`)
)

// TestBinaryAccessLog: -access-log writes one combined-format line per
// response, HTTP and HTTPS, 404s included, and the file is complete once
// the process has stopped.
func TestBinaryAccessLog(t *testing.T) {
	bin := buildHaboob(t)
	root := siteWith(t, "a.txt", "aaaa\n")
	logPath := filepath.Join(t.TempDir(), "access.log")
	r := start(t, bin, "-addr", "127.0.0.1:0", "-tls-addr", "127.0.0.1:0", "-root", root, "-profiler", "", "-access-log", logPath)
	var httpsAddr string
	deadline := time.After(10 * time.Second)
	for httpsAddr == "" {
		select {
		case line := <-r.logs:
			if m := httpsRE.FindStringSubmatch(line); m != nil {
				httpsAddr = m[1]
			}
		case <-deadline:
			t.Fatal("no ready line with the https address")
		}
	}
	tr := &nethttp.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	client := &nethttp.Client{Transport: tr, Timeout: 10 * time.Second}
	want := map[string]int{}
	do := func(url string, code int) {
		req, _ := nethttp.NewRequest("GET", url, nil)
		req.Header.Set("User-Agent", `test "agent"`)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Fatalf("GET %s: %d, want %d", url, resp.StatusCode, code)
		}
		want[fmt.Sprint(code)]++
	}
	for range 10 {
		do("http://"+r.addr+"/a.txt", 200)
		do("https://"+httpsAddr+"/a.txt", 200)
		do("http://"+r.addr+"/missing", 404)
	}
	tr.CloseIdleConnections()
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 30 {
		t.Fatalf("%d lines for 30 requests:\n%s", len(lines), data)
	}
	got := map[string]int{}
	for _, line := range lines {
		m := combinedRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not combined log format: %q", line)
		}
		got[m[3]]++
		if m[6] != `test \"agent\"` || m[1] != "127.0.0.1" {
			t.Errorf("fields of %q", line)
		}
		if m[3] == "200" && (m[2] != "GET /a.txt HTTP/1.1" || m[4] != "5") {
			t.Errorf("fields of %q", line)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
}

// TestBinaryAccessLogFormatFlag: a bad -access-log-format is a usage error.
func TestBinaryAccessLogFormatFlag(t *testing.T) {
	if code := run([]string{"-access-log", "-", "-access-log-format", "xml"}); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
}
