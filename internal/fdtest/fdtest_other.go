//go:build !linux

package fdtest

import "testing"

// Exhaustion is a process run out of descriptors by Exhaust.
type Exhaustion struct{}

// Exhaust skips the test: it needs Linux.
func Exhaust(t testing.TB, spare int) *Exhaustion {
	t.Helper()
	t.Skip("fdtest needs /proc/self/fd and RLIMIT_NOFILE semantics of Linux")
	return nil
}

// Restore does nothing.
func (e *Exhaustion) Restore() {}
