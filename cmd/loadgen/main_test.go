package main

import (
	"bufio"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPickerFollowsTheMix(t *testing.T) {
	p := newPicker(10)
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	var classes [4]int
	var files [9]int
	var dirs [10]int
	for range n {
		d, c, f := p.pick(r)
		dirs[d]++
		classes[c]++
		files[f]++
	}
	for c, w := range classWeight {
		if got := float64(classes[c]) / n; math.Abs(got-w) > 0.01 {
			t.Errorf("class %d drawn %.3f of the time, want %.2f", c, got, w)
		}
	}
	for f, w := range fileWeight {
		if got := float64(files[f]) / n * 100; math.Abs(got-w) > 1 {
			t.Errorf("file %d drawn %.2f%%, want %.1f%%", f, got, w)
		}
	}
	for d := 1; d < len(dirs); d++ { // Zipf: popularity falls with rank
		if dirs[d] >= dirs[d-1] {
			t.Errorf("dir %d drawn %d times, dir %d %d times", d, dirs[d], d-1, dirs[d-1])
		}
	}
}

func TestJainFairness(t *testing.T) {
	tests := []struct {
		counts []int
		want   float64
	}{
		{[]int{5, 5, 5, 5}, 1},
		{[]int{10, 0, 0, 0}, 0.25}, // one of four served: k/N
		{[]int{6, 6, 0}, 2.0 / 3},
	}
	for _, tt := range tests {
		stats := make([]clientStats, len(tt.counts))
		for i, c := range tt.counts {
			stats[i].requests = c
		}
		if got := summarize(stats, time.Second).fairness; math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("fairness%v = %v, want %v", tt.counts, got, tt.want)
		}
	}
}

func TestGenWritesTheFileSet(t *testing.T) {
	dir := t.TempDir()
	if err := gen([]string{"-dir", dir, "-dirs", "2"}); err != nil {
		t.Fatal(err)
	}
	for d := range 2 {
		for c := range 4 {
			for i := range filesPerClass {
				info, err := os.Stat(filepath.Join(dir, dirName(d), fileName(c, i)))
				if err != nil || info.Size() != int64(fileSize(c, i)) {
					t.Fatalf("%s/%s: %v", dirName(d), fileName(c, i), err)
				}
			}
		}
	}
	if fileSize(0, 0) != 102 || fileSize(3, 8) != 921600 {
		t.Fatal("SPECweb99 sizes: 102 bytes to 900 KiB")
	}
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name, resp    string
		status        int
		n             int64
		keep, wantErr bool
	}{
		{"keep-alive", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, 5, true, false},
		{"close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", 200, 2, false, false},
		{"1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", 200, 2, false, false},
		{"503", "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 4\r\n\r\nbusy", 503, 4, true, false},
		{"304", "HTTP/1.1 304 Not Modified\r\n\r\n", 304, 0, true, false},
		{"garbage", "SSH-2.0\r\n\r\n", 0, 0, false, true},
		{"truncated", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, 3, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			go func() {
				bufio.NewReader(server).ReadString('\n')
				server.Write([]byte(tt.resp))
				server.Close()
			}()
			status, n, keep, err := roundTrip(client, bufio.NewReader(client), []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), make([]byte, 4))
			client.Close()
			if (err != nil) != tt.wantErr || status != tt.status || n != tt.n || keep != tt.keep {
				t.Fatalf("got %d %d %v %v", status, n, keep, err)
			}
		})
	}
}

func TestRunAgainstAFileServer(t *testing.T) {
	srv := fileSetServer(t)
	out := captureStdout(t, func() error {
		return run([]string{"-url", srv.URL, "-dirs", "1", "-clients", "4", "-duration", "300ms", "-warmup", "50ms", "-name", "test", "-row"})
	})
	fields := strings.Split(strings.Trim(strings.TrimSpace(out), "|"), "|")
	if len(fields) != 10 || strings.TrimSpace(fields[0]) != "test" || strings.TrimSpace(fields[1]) != "4" {
		t.Fatalf("row %q", out)
	}
	if errs := strings.TrimSpace(fields[8]); errs != "0" {
		t.Fatalf("errors reported: %q", out)
	}
}

// fileSetServer serves a one-directory file set with net/http.FileServer
// until the test ends.
func fileSetServer(t *testing.T) *httptest.Server {
	t.Helper()
	dir := t.TempDir()
	if err := gen([]string{"-dir", dir, "-dirs", "1"}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv
}

func captureStdout(t *testing.T, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	ferr := f()
	os.Stdout = old
	w.Close()
	data, _ := readAll(r)
	if ferr != nil {
		t.Fatal(ferr)
	}
	return data
}

func readAll(r *os.File) (string, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), nil
		}
	}
}

func TestSummarizeMeanAndCDF(t *testing.T) {
	stats := []clientStats{
		{requests: 2, latencies: []int64{1000, 3000}},
		{requests: 2, latencies: []int64{2000, 10000}},
	}
	r := summarize(stats, time.Second)
	if r.mean != 4 || r.max != 10 {
		t.Fatalf("mean %v max %v, want 4 and 10 ms", r.mean, r.max)
	}
	if len(r.cdf) != len(cdfQuantiles) {
		t.Fatalf("%d CDF points, want %d", len(r.cdf), len(cdfQuantiles))
	}
	want := map[float64]float64{0: 1, 0.25: 1, 0.26: 2, 0.5: 2, 0.75: 3, 0.99: 10, 1: 10}
	for _, p := range r.cdf {
		if w, ok := want[p[1]]; ok && p[0] != w {
			t.Errorf("quantile %v = %v ms, want %v", p[1], p[0], w)
		}
	}
	for i := 1; i < len(r.cdf); i++ {
		if r.cdf[i][0] < r.cdf[i-1][0] || r.cdf[i][1] <= r.cdf[i-1][1] {
			t.Fatalf("CDF not monotone at %d: %v", i, r.cdf)
		}
	}
	if empty := summarize(make([]clientStats, 3), time.Second); empty.cdf != nil || empty.mean != 0 {
		t.Fatalf("no requests: %+v", empty)
	}
}

func TestRunWritesJSON(t *testing.T) {
	srv := fileSetServer(t)
	out := filepath.Join(t.TempDir(), "runs.jsonl")
	for _, clients := range []string{"1", "3"} {
		captureStdout(t, func() error {
			return run([]string{"-url", srv.URL, "-dirs", "1", "-clients", clients, "-duration", "200ms",
				"-warmup", "20ms", "-think", "1ms", "-per-conn", "5", "-name", "fs", "-row", "-json", out})
		})
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one per run:\n%s", len(lines), data)
	}
	for i, l := range lines {
		var res Result
		if err := json.Unmarshal([]byte(l), &res); err != nil {
			t.Fatal(err)
		}
		if res.Server != "fs" || res.Clients != []int{1, 3}[i] || res.PerConn != 5 || res.ThinkMS != 1 ||
			res.Requests == 0 || res.Errors != 0 || len(res.CDF) != len(cdfQuantiles) || res.MeanMS <= 0 {
			t.Fatalf("line %d: %+v", i, res)
		}
	}
}
