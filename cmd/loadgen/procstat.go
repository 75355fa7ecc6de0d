package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the unit of utime and stime in /proc/PID/stat (USER_HZ, 100
// on every Linux architecture Go supports).
const userHZ = 100

// procSample is what the server's processes had used at one moment:
// CPU time (user and system, all threads, in USER_HZ ticks) and context
// switches (voluntary and not, of the live threads).
type procSample struct {
	ticks    int64
	switches int64
}

// sampleProcs reads /proc for each process in pids and sums them.
func sampleProcs(pids []int) (procSample, error) {
	var total procSample
	for _, pid := range pids {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			return procSample{}, err
		}
		ticks, err := parseStatCPU(stat)
		if err != nil {
			return procSample{}, fmt.Errorf("%s/stat: %w", dir, err)
		}
		total.ticks += ticks
		tasks, err := filepath.Glob(filepath.Join(dir, "task", "*", "status"))
		if err != nil {
			return procSample{}, err
		}
		for _, t := range tasks {
			status, err := os.ReadFile(t)
			if err != nil {
				continue // the thread exited between the listing and the read
			}
			total.switches += parseStatusSwitches(status)
		}
	}
	return total, nil
}

// parseStatCPU returns utime+stime from the text of /proc/PID/stat. The
// command name, in parentheses, may hold spaces and parentheses, so the
// fields are counted after its last ')'.
func parseStatCPU(stat []byte) (int64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no ')' in %q", stat)
	}
	// After ") ": state(3) ppid ... utime(14) stime(15), numbered from 1
	// with pid and comm, so utime is the 12th field after the comm.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad utime %q or stime %q", f[11], f[12])
	}
	return utime + stime, nil
}

// parseStatusSwitches returns voluntary_ctxt_switches +
// nonvoluntary_ctxt_switches from the text of /proc/PID/task/TID/status.
func parseStatusSwitches(status []byte) int64 {
	var n int64
	for line := range strings.Lines(string(status)) {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "voluntary_ctxt_switches" && name != "nonvoluntary_ctxt_switches") {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err == nil {
			n += v
		}
	}
	return n
}

// parsePIDs reads -server-pids: process ids separated by spaces or commas.
func parsePIDs(s string) ([]int, error) {
	var pids []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("bad process id %q in -server-pids", f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// serverCost is the server's CPU time and context switches per request
// between two samples.
func serverCost(before, after procSample, requests int) (cpuMicros, switches float64) {
	if requests <= 0 {
		return 0, 0
	}
	n := float64(requests)
	return float64(after.ticks-before.ticks) * 1e6 / userHZ / n, float64(after.switches-before.switches) / n
}
