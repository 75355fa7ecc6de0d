package arashi_test

import (
	"strings"
	"testing"
)

// TestLogout logs in over a real socket, uses the session, logs out, and
// checks that the key then opens nothing: every page answers as for an
// unknown session (403, "Session expired").
func TestLogout(t *testing.T) {
	_, base := start(t, "{type: threshold, limit: 100000}")
	c := newClient(t, base)
	key := c.login("user2", "pass2")
	inbox := c.folders(key)["Inbox"]

	status, page, _ := c.do("GET", "/folders?s="+key, nil)
	if status != 200 || !strings.Contains(page, `id="logout" href="/logout?s=`+key+`"`) {
		t.Fatalf("folders: %d; the page has no Log out link to /logout?s=%s", status, key)
	}
	// Another session of the same user outlives this one's logout.
	other := c.login("user2", "pass2")

	status, _, h := c.do("GET", "/logout?s="+key, nil)
	if status != 303 || h.Get("Location") != "/" {
		t.Fatalf("logout: %d %q, want 303 to /", status, h.Get("Location"))
	}
	for _, target := range []string{
		"/folders?s=" + key,
		"/list?s=" + key + "&f=" + inbox[0],
		"/search?s=" + key + "&q=a",
		"/compose?s=" + key,
	} {
		status, page, _ := c.do("GET", target, nil)
		if status != 403 || !strings.Contains(page, "Session expired") {
			t.Errorf("GET %s after logout: %d, want 403 Session expired", target, status)
		}
	}
	if status, _, _ := c.do("GET", "/folders?s="+other, nil); status != 200 {
		t.Errorf("the user's other session after a logout: %d, want 200", status)
	}

	// Logging out again, or an unknown or malformed key, is harmless.
	for _, k := range []string{key, "0123456789abcdef", "not-hex", ""} {
		if status, _, h := c.do("GET", "/logout?s="+k, nil); status != 303 || h.Get("Location") != "/" {
			t.Errorf("logout of %q: %d %q, want 303 to /", k, status, h.Get("Location"))
		}
	}
	if status, _, _ := c.do("GET", "/folders?s="+other, nil); status != 200 {
		t.Errorf("the other session after logouts of unknown keys: %d, want 200", status)
	}
	// A new login still works.
	c.folders(c.login("user2", "pass2"))
}
