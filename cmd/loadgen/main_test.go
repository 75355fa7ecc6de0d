package main

import (
	"bufio"
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
	dir := t.TempDir()
	if err := gen([]string{"-dir", dir, "-dirs", "1"}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
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
