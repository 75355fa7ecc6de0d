package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseStatCPU(t *testing.T) {
	tests := []struct {
		name, stat string
		want       int64
		wantErr    bool
	}{
		{"plain", "42 (haboob) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 1000 0 0", 325, false},
		{"name with spaces and parentheses", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0", 7, false},
		{"no command name", "7 a R 1", 0, true},
		{"too few fields", "7 (x) R 1 2 3", 0, true},
		{"not a number", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 u s 0 0", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tt.stat))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("parseStatCPU = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseStatusSwitches(t *testing.T) {
	tests := []struct {
		name, status string
		want         int64
	}{
		{"both", "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n", 15},
		{"none", "Name:\tx\nVmRSS:\t100 kB\n", 0},
		{"no final newline", "voluntary_ctxt_switches:\t5", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseStatusSwitches([]byte(tt.status)); got != tt.want {
				t.Fatalf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParsePIDs(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"12", []int{12}, false},
		{"12 13,14", []int{12, 13, 14}, false},
		{"12 x", nil, true},
		{"-3", nil, true},
	}
	for _, tt := range tests {
		got, err := parsePIDs(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Fatalf("parsePIDs(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestServerCost(t *testing.T) {
	tests := []struct {
		name          string
		before, after procSample
		requests      int
		cpu, switches float64
	}{
		{"one tick over 100 requests", procSample{10, 5}, procSample{11, 25}, 100, 100, 0.2},
		{"no requests", procSample{}, procSample{5, 5}, 0, 0, 0},
	}
	for _, tt := range tests {
		cpu, sw := serverCost(tt.before, tt.after, tt.requests)
		if cpu != tt.cpu || sw != tt.switches {
			t.Fatalf("%s: got %v µs, %v switches; want %v, %v", tt.name, cpu, sw, tt.cpu, tt.switches)
		}
	}
}

func TestSampleProcsReadsThisProcess(t *testing.T) {
	s, err := sampleProcs([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if s.switches <= 0 || s.ticks < 0 {
		t.Fatalf("sample of a running test process: %+v", s)
	}
	if _, err := sampleProcs([]int{os.Getpid(), 1 << 30}); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

// TestRunReportsServerCost runs against a server in this process, so its
// own pid is the server's.
func TestRunReportsServerCost(t *testing.T) {
	srv := fileSetServer(t)
	out := filepath.Join(t.TempDir(), "runs.jsonl")
	row := captureStdout(t, func() error {
		return run([]string{"-url", srv.URL, "-dirs", "1", "-clients", "4", "-duration", "300ms", "-warmup", "50ms",
			"-name", "fs", "-row", "-json", out, "-server-pids", strconv.Itoa(os.Getpid())})
	})
	if fields := strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|"); len(fields) != 12 {
		t.Fatalf("row %q: want 12 columns with the server's CPU and switches", row)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res Result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.ServerSwitches <= 0 {
		t.Fatalf("no server cost in %+v", res)
	}
}
