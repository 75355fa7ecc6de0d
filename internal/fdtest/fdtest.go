//go:build linux

package fdtest

import (
	"os"
	"strconv"
	"syscall"
	"testing"
)

// Exhaustion is a process run out of descriptors by Exhaust.
type Exhaustion struct {
	t        testing.TB
	orig     syscall.Rlimit
	fillers  []*os.File
	restored bool
}

// Exhaust takes every descriptor the process may open but spare (left
// free for the test's own sockets), skipping the test where it cannot.
// Restore gives them back; the test's cleanup does if it did not.
func Exhaust(t testing.TB, spare int) *Exhaustion {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("fdtest: %v", err)
	}
	hi := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > hi {
			hi = n
		}
	}
	e := &Exhaustion{t: t}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &e.orig); err != nil {
		t.Skipf("fdtest: getrlimit: %v", err)
	}
	low := e.orig
	low.Cur = uint64(hi + 32 + spare)
	if low.Cur >= e.orig.Cur {
		t.Skipf("fdtest: descriptor limit %d too low to lower", e.orig.Cur)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("fdtest: setrlimit: %v", err)
	}
	t.Cleanup(e.Restore)
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		e.fillers = append(e.fillers, f)
	}
	if len(e.fillers) < spare+1 {
		e.Restore()
		t.Fatalf("fdtest: only %d descriptors could be opened below the lowered limit", len(e.fillers))
	}
	for _, f := range e.fillers[len(e.fillers)-spare:] {
		f.Close()
	}
	e.fillers = e.fillers[:len(e.fillers)-spare]
	return e
}

// Restore closes the fillers and puts the limit back.
func (e *Exhaustion) Restore() {
	if e.restored {
		return
	}
	e.restored = true
	for _, f := range e.fillers {
		f.Close()
	}
	e.fillers = nil
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &e.orig); err != nil {
		e.t.Errorf("fdtest: restore RLIMIT_NOFILE: %v", err)
	}
}
