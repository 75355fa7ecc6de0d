package arashi_test

import (
	"testing"
)

// TestSessionIsPrincipal checks over a real socket that a logged-in user's
// requests run on behalf of that user, set at the HTTP edge, so that a
// per-principal predicate on a page stage tells two users of one client
// address apart, and that a request whose session key opens nothing runs
// on behalf of its client's address. Each stage's admission accounts per
// principal and decides per session: a principal's first request takes a
// token from a bucket of two (refilled once in 1000 s) and its later ones
// get the same answer for a minute.
func TestSessionIsPrincipal(t *testing.T) {
	_, base := start(t, "{type: account, of: {type: session, window: 1m, of: {type: rate, rate: 0.001, depth: 2}}}")
	c := newClient(t, base) // every request from 127.0.0.1
	k1 := c.login("user1", "pass1")
	k2 := c.login("user2", "pass2")
	for i, step := range []struct {
		key  string
		want int
	}{
		{"0000000000000001", 403}, // the address: admitted (token 1), no session
		{k1, 200},                 // user1: admitted (token 2)
		{k2, 503},                 // user2: a new principal, no token left
		{k1, 200},                 // user1 again: admitted for the window
		{"ffffffffffffffff", 403}, // the address again: admitted for the window
		{"", 403},                 // no key: the address
		{k2, 503},                 // user2 stays refused
	} {
		if status, _, _ := c.do("GET", "/folders?s="+step.key, nil); status != step.want {
			t.Errorf("request %d (s=%q): status %d, want %d", i, step.key, status, step.want)
		}
	}
}
