package arashi_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
)

// TestLogoutLeavesEvictionExact: a logged-out key leaves the eviction
// order too, so a full table evicts the oldest live session, never a
// live one in place of a dead key, and the order does not grow with
// logins and logouts.
func TestLogoutLeavesEvictionExact(t *testing.T) {
	db, err := arashi.Open(filepath.Join(t.TempDir(), "mail.db"), arashi.DBConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, err := arashi.New(arashi.Options{DB: db, MaxSessions: 3, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	hex := func(k uint64) string { return fmt.Sprintf("%016x", k) }

	k1, k2, k3 := hex(a.NewSession(1, "u1")), hex(a.NewSession(2, "u2")), hex(a.NewSession(3, "u3"))
	a.EndSession(k2)
	a.EndSession(k2) // again: harmless
	a.EndSession("zz")
	if a.HasSession(k2) || !a.HasSession(k1) || !a.HasSession(k3) || a.SessionOrder() != 2 {
		t.Fatalf("after logout of k2: k1 %v k2 %v k3 %v, order %d", a.HasSession(k1), a.HasSession(k2), a.HasSession(k3), a.SessionOrder())
	}
	k4 := hex(a.NewSession(4, "u4")) // room: nothing evicted
	if !a.HasSession(k1) || !a.HasSession(k3) || !a.HasSession(k4) {
		t.Fatal("a login into a freed slot evicted a live session")
	}
	k5 := hex(a.NewSession(5, "u5")) // full: the oldest (k1) goes
	if a.HasSession(k1) || !a.HasSession(k3) || !a.HasSession(k4) || !a.HasSession(k5) {
		t.Fatal("a full table did not evict exactly the oldest session")
	}
	// The table is full: the first of these logins evicts k3; then each
	// logout frees the slot its login took.
	for i := 0; i < 100; i++ {
		a.EndSession(hex(a.NewSession(9, "u9")))
	}
	if n := a.SessionOrder(); n != 2 || a.HasSession(k3) || !a.HasSession(k4) || !a.HasSession(k5) {
		t.Errorf("after 100 logins and logouts: order %d keys (want 2), k3 %v k4 %v k5 %v (want false true true)",
			n, a.HasSession(k3), a.HasSession(k4), a.HasSession(k5))
	}
}
