package arashi_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	nethttp "net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// digest hashes every row of a generated database.
func digest(t *testing.T, db *arashi.DB) string {
	t.Helper()
	h := sha256.New()
	for _, q := range []string{
		`SELECT id, name, password FROM users ORDER BY id`,
		`SELECT id, user_id, name FROM folders ORDER BY id`,
		`SELECT id, user_id, folder_id, sender, recipient, subject, date, seen, body FROM messages ORDER BY id`,
	} {
		rows, err := db.SQL().Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(h, vals...)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func generate(t *testing.T, seed uint64) (*arashi.DB, arashi.GenStats) {
	t.Helper()
	db, err := arashi.Open(filepath.Join(t.TempDir(), "mail.db"), arashi.DBConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st, err := arashi.Generate(context.Background(), db, arashi.GenConfig{Users: 12, Seed: seed, MaxFolder: 300})
	if err != nil {
		t.Fatal(err)
	}
	return db, st
}

func TestGenerateIsDeterministic(t *testing.T) {
	a, sa := generate(t, 7)
	b, sb := generate(t, 7)
	c, _ := generate(t, 8)
	if sa.Messages != sb.Messages || sa.Users != 12 || sa.Folders != 48 || sa.Largest != 300 {
		t.Fatalf("stats %+v and %+v", sa, sb)
	}
	if da, db := digest(t, a), digest(t, b); da != db {
		t.Fatal("the same seed generated different databases")
	}
	if digest(t, a) == digest(t, c) {
		t.Fatal("different seeds generated the same database")
	}
	if !a.FullText() {
		t.Error("modernc.org/sqlite should have FTS5")
	}
	// A second generation into a filled database is refused.
	if _, err := arashi.Generate(context.Background(), a, arashi.GenConfig{Users: 1}); err == nil {
		t.Error("Generate into a filled database succeeded")
	}
}

func TestInboxSizesAreHeavyTailed(t *testing.T) {
	var small, large int
	for i := 1; i <= 2000; i++ {
		n := arashi.InboxSize(1, i, arashi.MaxFolder, 50, 1.6)
		if n < 1 || n > arashi.MaxFolder {
			t.Fatalf("user %d: inbox %d outside [1, %d]", i, n, arashi.MaxFolder)
		}
		if n <= 100 {
			small++
		}
		if n >= 1000 {
			large++
		}
		if n != arashi.InboxSize(1, i, arashi.MaxFolder, 50, 1.6) {
			t.Fatal("InboxSize is not deterministic")
		}
	}
	if arashi.InboxSize(1, 1, arashi.MaxFolder, 50, 1.6) != arashi.MaxFolder {
		t.Error("user1 should have the largest folder")
	}
	// Most folders are small, a few are huge.
	if small < 1000 || large < 20 || large > 400 {
		t.Errorf("%d folders of <= 100 messages, %d of >= 1000: not heavy-tailed", small, large)
	}
}

// start runs Arashi on a free port with a small generated store.
func start(t *testing.T, predicate string) (*arashi.Service, string) {
	t.Helper()
	svc := startConfig(t, arashi.Config{Predicate: predicate})
	return svc, "http://" + svc.App.Addr().String()
}

// startConfig runs Arashi with cfg on a free port with a small generated
// store, and shuts it down when the test ends.
func startConfig(t *testing.T, cfg arashi.Config) *arashi.Service {
	t.Helper()
	cfg.Addr, cfg.Users, cfg.Seed, cfg.MaxFolder, cfg.Logger = "127.0.0.1:0", 6, 3, 120, quiet()
	svc, err := arashi.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return svc
}

type client struct {
	t    *testing.T
	base string
	c    *nethttp.Client
	hdr  map[string]string
}

func newClient(t *testing.T, base string) *client {
	return &client{t: t, base: base, c: &nethttp.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse },
	}}
}

func (c *client) do(method, target string, form url.Values) (int, string, nethttp.Header) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := nethttp.NewRequest(method, c.base+target, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range c.hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func (c *client) login(name, pw string) string {
	c.t.Helper()
	status, _, h := c.do("POST", "/login", url.Values{"user": {name}, "password": {pw}})
	if status != 303 {
		c.t.Fatalf("login %s: status %d", name, status)
	}
	l, _ := url.Parse(h.Get("Location"))
	key := l.Query().Get("s")
	if l.Path != "/folders" || len(key) != 16 {
		c.t.Fatalf("login redirect %q: want /folders with a 64-bit key", h.Get("Location"))
	}
	return key
}

var (
	reFolder = regexp.MustCompile(`class="folder" data-f="(\d+)" href="[^"]*">(\w+)</a></td><td>(\d+)</td>`)
	reMsg    = regexp.MustCompile(`class="msg" data-m="(\d+)"[^>]*>([^<]*)</a>`)
)

// folders returns name -> {id, count} of the folders page.
func (c *client) folders(key string) map[string][2]string {
	c.t.Helper()
	status, page, _ := c.do("GET", "/folders?s="+key, nil)
	if status != 200 {
		c.t.Fatalf("folders: %d", status)
	}
	out := map[string][2]string{}
	for _, m := range reFolder.FindAllStringSubmatch(page, -1) {
		out[m[2]] = [2]string{m[1], m[3]}
	}
	if len(out) != 4 {
		c.t.Fatalf("folders page lists %v", out)
	}
	return out
}

// TestRequestTypes drives every request type through a real socket.
func TestRequestTypes(t *testing.T) {
	// No admission control here: on a busy test machine an rt controller
	// might refuse a request (TestDefaultConfig checks the rt stages).
	_, base := start(t, "{type: threshold, limit: 100000}")
	c := newClient(t, base)

	if status, page, _ := c.do("GET", "/", nil); status != 200 || !strings.Contains(page, `action="/login"`) {
		t.Fatalf("login page: %d", status)
	}
	if status, _, _ := c.do("POST", "/login", url.Values{"user": {"user2"}, "password": {"wrong"}}); status != 403 {
		t.Errorf("wrong password: status %d, want 403", status)
	}
	if status, _, _ := c.do("GET", "/folders?s=0123456789abcdef", nil); status != 403 {
		t.Errorf("unknown session: status %d, want 403", status)
	}
	key := c.login("user2", "pass2")
	fs := c.folders(key)
	inbox := fs[arashi.InboxFolder]

	status, page, _ := c.do("GET", "/list?s="+key+"&f="+inbox[0], nil)
	msgs := reMsg.FindAllStringSubmatch(page, -1)
	if status != 200 || len(msgs) == 0 || len(msgs) > arashi.PageSize || !strings.Contains(page, inbox[1]+" messages") {
		t.Fatalf("list: %d, %d messages", status, len(msgs))
	}
	if status, _, _ := c.do("GET", "/list?s="+key+"&f="+inbox[0]+"&sort=subject&page=1", nil); status != 200 {
		t.Errorf("list sorted by subject: %d", status)
	}
	// Another user's folder is not found.
	other := c.folders(c.login("user3", "pass3"))
	if status, _, _ := c.do("GET", "/list?s="+key+"&f="+other[arashi.InboxFolder][0], nil); status != 404 {
		t.Errorf("another user's folder: status %d, want 404", status)
	}

	id, subject := msgs[0][1], msgs[0][2]
	status, page, _ = c.do("GET", "/show?s="+key+"&m="+id, nil)
	if status != 200 || !strings.Contains(page, `<h2 id="subject">`+subject+`</h2>`) || !strings.Contains(page, `<pre class="body">`) {
		t.Fatalf("show %s: %d", id, status)
	}

	word := strings.Fields(subject)[0]
	status, page, _ = c.do("GET", "/search?s="+key+"&q="+url.QueryEscape(word), nil)
	if status != 200 || !strings.Contains(page, `data-m="`) {
		t.Errorf("search %q: %d, no results", word, status)
	}

	// Refile to Archive, then delete (to Trash); each answers 303 to the folder.
	archive, trash := fs[arashi.ArchiveFolder], fs[arashi.TrashFolder]
	status, _, h := c.do("POST", "/refile", url.Values{"s": {key}, "m": {id}, "to": {archive[0]}})
	if status != 303 || !strings.HasPrefix(h.Get("Location"), "/list?") {
		t.Fatalf("refile: %d %q", status, h.Get("Location"))
	}
	status, _, _ = c.do("POST", "/delete", url.Values{"s": {key}, "m": {id}})
	if status != 303 {
		t.Fatalf("delete: %d", status)
	}
	if status, _, _ := c.do("GET", "/delete?s="+key+"&m="+id, nil); status != 405 {
		t.Errorf("delete by GET: %d, want 405", status)
	}
	after := c.folders(key)
	if after[arashi.TrashFolder][1] != "1" || after[arashi.ArchiveFolder][1] != archive[1] || trash[1] != "0" {
		t.Errorf("after refile+delete: %v (before %v)", after, fs)
	}

	// Compose and send to user3: its Inbox grows by one, our Sent too.
	if status, page, _ := c.do("GET", "/compose?s="+key, nil); status != 200 || !strings.Contains(page, `action="/send"`) {
		t.Errorf("compose: %d", status)
	}
	status, _, _ = c.do("POST", "/send", url.Values{"s": {key}, "to": {"user3"}, "subject": {"lunch"}, "body": {"quokka cafe at noon"}})
	if status != 303 {
		t.Fatalf("send: %d", status)
	}
	key3 := c.login("user3", "pass3")
	if got, want := c.folders(key3)[arashi.InboxFolder][1], other[arashi.InboxFolder][1]; got == want {
		t.Errorf("user3's Inbox still has %s messages after a send", got)
	}
	status, page, _ = c.do("GET", "/search?s="+key3+"&q=quokka+cafe", nil)
	if status != 200 || !strings.Contains(page, ">lunch</a>") {
		t.Errorf("the sent message is not found by search: %d", status)
	}
	if status, _, _ := c.do("POST", "/send", url.Values{"s": {key}, "to": {"nobody"}, "subject": {"x"}}); status != 404 {
		t.Errorf("send to an unknown user: %d, want 404", status)
	}
}

// TestClassReachesMulticlass sends requests with X-Class headers and checks
// that the multiclass predicate of the ListFolders stage counted them by
// class.
func TestClassReachesMulticlass(t *testing.T) {
	svc, base := start(t, "{type: multiclass, targets: {0: 5s, 1: 5s}}")
	c := newClient(t, base)
	key := c.login("user2", "pass2")
	for i, class := range []string{"1", "0", "1", "1", "0"} {
		c.hdr = map[string]string{"X-Class": class}
		if status, _, _ := c.do("GET", "/folders?s="+key, nil); status != 200 {
			t.Fatalf("request %d: %d", i, status)
		}
	}
	st, ok := svc.Manager.Stage("ListFolders")
	if !ok {
		t.Fatal("no ListFolders stage")
	}
	mc, ok := st.Sink().Predicate().(interface{ Accepted(class int) uint64 }) // multiclass
	if !ok {
		t.Fatalf("ListFolders predicate is %T", st.Sink().Predicate())
	}
	if a0, a1 := mc.Accepted(0), mc.Accepted(1); a0 != 2 || a1 != 3 {
		t.Errorf("accepted by class: 0: %d, 1: %d; want 2 and 3", a0, a1)
	}
}

// TestDefaultConfig checks that configs/arashi.yaml gives every request
// type its own stage with its own rt controller.
func TestDefaultConfig(t *testing.T) {
	svc, _ := start(t, "")
	seen := map[*enqueuepred.ResponseTime]bool{}
	for _, k := range arashi.Kinds() {
		name := strings.TrimPrefix(k.Handler(), "arashi.")
		st, ok := svc.Manager.Stage(name)
		if !ok {
			t.Errorf("no stage %s for %v", name, k)
			continue
		}
		rt, ok := st.Sink().Predicate().(*enqueuepred.ResponseTime)
		if !ok || seen[rt] || rt.Target() != 250*time.Millisecond {
			t.Errorf("stage %s: predicate %T, want its own rt with target 250ms", name, st.Sink().Predicate())
			continue
		}
		seen[rt] = true
	}
}

// The embedded configuration is configs/arashi.yaml.
func TestEmbeddedConfig(t *testing.T) {
	data, err := os.ReadFile("../../configs/arashi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(configs.Arashi) {
		t.Fatal("configs.Arashi differs from configs/arashi.yaml")
	}
	if !strings.Contains(string(data), "predicate: "+arashi.DefaultPredicate) {
		t.Fatalf("configs/arashi.yaml has no %q", arashi.DefaultPredicate)
	}
}
