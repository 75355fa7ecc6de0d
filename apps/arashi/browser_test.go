package arashi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/browsertest"
)

// TestBrowser uses Arashi from headless Chromium: it logs in by submitting
// the login form (a local page posts it, and the browser follows the 303
// to the folders page), then follows the links the pages carry — the
// Inbox, a message — and searches, each a page load of its own (the
// session key travels in the links). It saves a screenshot of the folder
// as arashi-folder.png in $SANDSTORM_ARTIFACTS. Skipped without chromium.
func TestBrowser(t *testing.T) {
	browser := browsertest.New(t)
	_, base := start(t, "{type: threshold, limit: 100000}")

	// Log in: a page that submits the form at once.
	form := `<!DOCTYPE html><html><body><form method="post" action="` + base + `/login">
<input name="user" value="user2"><input name="password" value="pass2"></form>
<script>document.forms[0].submit()</script></body></html>`
	page := filepath.Join(t.TempDir(), "login.html")
	if err := os.WriteFile(page, []byte(form), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := browser.DOM("file://" + page)
	inbox := regexp.MustCompile(`class="folder" data-f="\d+" href="(/list\?s=[0-9a-f]{16}&amp;f=\d+)">Inbox</a>`).FindStringSubmatch(dom)
	if inbox == nil {
		t.Fatalf("after logging in, no Inbox link:\n%s", dom)
	}
	link := func(s string) string { return base + strings.ReplaceAll(s, "&amp;", "&") }

	// List the Inbox, open its first message.
	folder := link(inbox[1])
	dom = browser.DOM(folder)
	msg := regexp.MustCompile(`class="msg" data-m="\d+" href="(/show\?[^"]+)">([^<]*)</a>`).FindStringSubmatch(dom)
	if msg == nil || !strings.Contains(dom, "<h2>Inbox") {
		t.Fatalf("the Inbox lists no messages:\n%s", dom)
	}
	dom = browser.DOM(link(msg[1]))
	if !strings.Contains(dom, `<h2 id="subject">`+msg[2]+`</h2>`) || !strings.Contains(dom, `<pre class="body">`) {
		t.Fatalf("message %q not shown:\n%s", msg[2], dom)
	}

	// Search for the first word of its subject.
	key := regexp.MustCompile(`s=([0-9a-f]{16})`).FindStringSubmatch(msg[1])[1]
	word := strings.Fields(msg[2])[0]
	dom = browser.DOM(base + "/search?s=" + key + "&q=" + word)
	if !strings.Contains(dom, "Search: “"+word+"”") || !strings.Contains(dom, `class="msg"`) {
		t.Fatalf("search for %q found nothing:\n%s", word, dom)
	}

	shot := filepath.Join(browsertest.ArtifactDir(t), "arashi-folder.png")
	browser.Screenshot(folder, shot, 1100, 900)
	t.Logf("screenshot: %s", shot)
}
