package arashi_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
)

var reUnreadCell = regexp.MustCompile(`class="folder" data-f="\d+" href="[^"]*">(\w+)</a></td><td>\d+</td><td>(\d*)</td>`)

// TestSentHasNoUnread: the Sent folder is one's own mail; neither the
// folders page nor the Sent page shows unread state for it, even for a
// store whose Sent messages are marked unseen (stores generated before
// the generator marked them read).
func TestSentHasNoUnread(t *testing.T) {
	svc, base := start(t, "{type: threshold, limit: 100000}")
	c := newClient(t, base)
	key := c.login("user2", "pass2")
	fs := c.folders(key)
	sent, inbox := fs[arashi.SentFolder][0], fs[arashi.InboxFolder][0]

	var unseen int
	if err := svc.DB.SQL().QueryRow(`SELECT count(*) FROM messages WHERE folder_id = ? AND seen = 0`, sent).Scan(&unseen); err != nil {
		t.Fatal(err)
	}
	if unseen != 0 {
		t.Errorf("the generator made %d unseen messages in Sent", unseen)
	}
	// An older store: every message of Sent and Inbox unseen.
	if _, err := svc.DB.SQL().Exec(`UPDATE messages SET seen = 0 WHERE folder_id IN (?, ?)`, sent, inbox); err != nil {
		t.Fatal(err)
	}

	status, page, _ := c.do("GET", "/folders?s="+key, nil)
	if status != 200 {
		t.Fatalf("folders: %d", status)
	}
	cells := map[string]string{}
	for _, m := range reUnreadCell.FindAllStringSubmatch(page, -1) {
		cells[m[1]] = m[2]
	}
	if len(cells) != 4 || cells[arashi.SentFolder] != "" || cells[arashi.InboxFolder] == "" || cells[arashi.InboxFolder] == "0" {
		t.Errorf("folders page unread cells %q: want none for Sent, a count for Inbox", cells)
	}

	status, page, _ = c.do("GET", "/list?s="+key+"&f="+sent, nil)
	if status != 200 || !strings.Contains(page, `class="msg"`) {
		t.Fatalf("Sent page: %d, no messages", status)
	}
	if strings.Contains(page, `class="unread"`) {
		t.Error("the Sent page marks messages unread")
	}
	// The Inbox still marks them.
	if _, page, _ := c.do("GET", "/list?s="+key+"&f="+inbox, nil); !strings.Contains(page, `class="unread"`) {
		t.Error("the Inbox page marks no message unread")
	}
}

var (
	reNewer = regexp.MustCompile(`<a class="newer" href="([^"]*)">« newer</a>`)
	reOlder = regexp.MustCompile(`<a class="older" href="([^"]*)">older »</a>`)
)

// TestPagingBothWays: the first page of a folder links only to older
// messages; the second links back to the first ("newer") and on.
func TestPagingBothWays(t *testing.T) {
	_, base := start(t, "{type: threshold, limit: 100000}")
	c := newClient(t, base)
	key := c.login("user1", "pass1") // user1 has the largest Inbox (120 here)
	inbox := c.folders(key)[arashi.InboxFolder]
	if inbox[1] != "120" {
		t.Fatalf("user1's Inbox has %s messages, want 120 (3 pages)", inbox[1])
	}
	list := "/list?s=" + key + "&f=" + inbox[0]

	status, first, _ := c.do("GET", list, nil)
	if status != 200 || reNewer.MatchString(first) || !reOlder.MatchString(first) {
		t.Fatalf("page 1: %d; want an older link and no newer one", status)
	}
	older := strings.ReplaceAll(reOlder.FindStringSubmatch(first)[1], "&amp;", "&")
	if !strings.HasSuffix(older, "&page=1") {
		t.Errorf("page 1's older link %q, want page=1", older)
	}

	status, second, _ := c.do("GET", older, nil)
	if status != 200 || !strings.Contains(second, "51–100") {
		t.Fatalf("page 2: %d, not messages 51–100", status)
	}
	newer := reNewer.FindStringSubmatch(second)
	if newer == nil || !reOlder.MatchString(second) {
		t.Fatal("page 2 lacks a newer or an older link")
	}
	status, back, _ := c.do("GET", strings.ReplaceAll(newer[1], "&amp;", "&"), nil)
	if status != 200 || back != first {
		t.Errorf("page 2's newer link %q: %d, not page 1", newer[1], status)
	}

	_, last, _ := c.do("GET", list+"&page=2", nil)
	if !strings.Contains(last, "101–120") || !reNewer.MatchString(last) || reOlder.MatchString(last) {
		t.Error("the last page: want messages 101–120, a newer link and no older one")
	}
	// Sorted by subject, the links say previous / next.
	_, bySubject, _ := c.do("GET", list+"&sort=subject&page=1", nil)
	if !strings.Contains(bySubject, "« previous</a>") || !strings.Contains(bySubject, "next »</a>") {
		t.Error("page 2 by subject lacks previous / next links")
	}
}
