package arashi

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

//go:embed site templates
var files embed.FS

var pages = template.Must(template.ParseFS(files, "templates/*.html"))

// Kind is a request type: one stage each, with its own admission
// controller.
type Kind int

// The request types of Arashi (thesis Fig. 46, plus compose/send).
const (
	Login Kind = iota
	ListFolders
	ListMessages
	ShowMessage
	Delete
	Refile
	Search
	Compose
	numKinds
)

var kindNames = [numKinds]string{"login", "folders", "list", "show", "delete", "refile", "search", "compose"}

// String is the request type's short name ("login", "list", ...).
func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Kinds lists the request types.
func Kinds() []Kind {
	out := make([]Kind, numKinds)
	for i := range out {
		out[i] = Kind(i)
	}
	return out
}

// Handler is the registry name of a request type's handler:
// "arashi.Login", "arashi.ListFolders", ...
func (k Kind) Handler() string {
	return "arashi." + [numKinds]string{"Login", "ListFolders", "ListMessages", "ShowMessage", "Delete", "Refile", "Search", "Compose"}[k]
}

// PageSize is how many messages a folder page lists.
const PageSize = 50

// Options configure an App.
type Options struct {
	DB     *DB    // the mail store (required)
	Addr   string // listen address; overrides HttpRecv's socket address
	Logger *slog.Logger
	// MaxSessions bounds the session table; the oldest sessions are
	// forgotten first (default 65536).
	MaxSessions int
	// Timeout bounds one request's database work (default 30s).
	Timeout time.Duration
	// Degrade selects service degradation (default DegradeOff).
	Degrade Degrade
}

// App is one Arashi instance: Haboob's stages (HttpRecv's URL dispatch,
// the page cache for the static login page and style sheet, HttpSend)
// plus one stage per request type, sharing the mail store and the session
// table. Register its handlers, build the manager from configs/arashi.yaml,
// start it; Shutdown the App (the HTTP server) before the manager, then
// Close it.
type App struct {
	opts Options
	hb   *haboob.Server
	root string // the extracted static site

	mu        sync.Mutex
	sessions  map[uint64]session
	order     []uint64 // session keys, oldest first
	degraders [numKinds]*enqueuepred.Degrader
	timing    atomic.Bool
	timings   [numKinds][]Timing
}

type session struct {
	user int64
	name string
}

// New returns an App serving opts.DB; its static pages are extracted to a
// temporary directory that Close removes.
func New(opts Options) (*App, error) {
	if opts.DB == nil {
		return nil, errors.New("arashi: Options.DB is required")
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = 1 << 16
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dir, err := os.MkdirTemp("", "arashi-site-")
	if err != nil {
		return nil, err
	}
	site, _ := fs.Sub(files, "site")
	if err := haboob.ExtractSite(site, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	a := &App{opts: opts, root: dir, sessions: make(map[uint64]session)}
	a.hb = haboob.New(haboob.Options{Root: dir, Addr: opts.Addr, Logger: opts.Logger, Principal: a.principal})
	return a, nil
}

// principal is Haboob's principal hook: a request whose s= key (in the
// query or a POSTed form) opens a live session runs on behalf of its
// logged-in user, "user:NAME", whichever address it comes from; other
// requests (/login, the static pages, an unknown or ended key) keep their
// client's address. The principal names no class: it is the request's
// class (its X-Class header, as HttpRecv's `principal: {class: ...}`
// lets it count), because users have no class of their own in the mail
// store.
func (a *App) principal(req *http.Request) (any, bool) {
	s, ok := a.session(formValues(req).Get("s"))
	if !ok {
		return nil, false
	}
	return enqueuepred.Principal{ID: PrincipalPrefix + s.name}, true
}

// PrincipalPrefix begins the principal ID of a logged-in user's requests
// ("user:NAME"), so that no user name is taken for a client address.
const PrincipalPrefix = "user:"

// Register adds Haboob's handlers and one handler per request type
// (Kind.Handler) to r.
func (a *App) Register(r *stage.Registry) {
	a.hb.Register(r)
	for _, k := range Kinds() {
		r.Register(k.Handler(), func() stage.Handler { return &page{app: a, kind: k} })
	}
}

// Haboob returns the web server the App runs on.
func (a *App) Haboob() *haboob.Server { return a.hb }

// Addr is the address the server listens on (nil before it started).
func (a *App) Addr() net.Addr { return a.hb.Addr() }

// Shutdown closes the HTTP server gracefully; call it before the
// manager's Shutdown.
func (a *App) Shutdown(ctx context.Context) error { return a.hb.Shutdown(ctx) }

// Close closes the HTTP server now and removes the extracted static site.
// It does not close the DB.
func (a *App) Close() error {
	return errors.Join(a.hb.Close(), os.RemoveAll(a.root))
}

// newSession makes a 64-bit session key for user (thesis §6.3.1: the key
// carried in every link authenticates the requests after login).
func (a *App) newSession(user int64, name string) uint64 {
	var b [8]byte
	a.mu.Lock()
	defer a.mu.Unlock()
	var key uint64
	for key == 0 || a.sessions[key] != (session{}) {
		_, _ = crand.Read(b[:]) // never fails (crypto/rand documents it)
		key = binary.LittleEndian.Uint64(b[:])
	}
	if len(a.order) >= a.opts.MaxSessions {
		delete(a.sessions, a.order[0])
		a.order = a.order[1:]
	}
	a.sessions[key] = session{user: user, name: name}
	a.order = append(a.order, key)
	return key
}

// endSession forgets the session of key (a hex key as in the links): the
// key opens nothing afterwards. An unknown or malformed key is ignored.
func (a *App) endSession(key string) {
	k, err := strconv.ParseUint(key, 16, 64)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.sessions[k]; !ok {
		return
	}
	delete(a.sessions, k)
	// Logging out is rare: a scan of the order (at most MaxSessions keys)
	// keeps it exact, so eviction never drops a live session for a dead one.
	if i := slices.Index(a.order, k); i >= 0 {
		a.order = slices.Delete(a.order, i, i+1)
	}
}

func (a *App) session(key string) (session, bool) {
	k, err := strconv.ParseUint(key, 16, 64)
	if err != nil {
		return session{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[k]
	return s, ok
}

// pageArgs are a request type stage's args.
type pageArgs struct {
	Send       string        `yaml:"send"`       // the stage that sends replies (default HttpSend)
	RetryAfter time.Duration `yaml:"retryAfter"` // Retry-After of a 503 (default 1s)
}

// page is the stage handler of one request type: it checks the session,
// runs the type's queries on the mail store (through its bounded pool) and
// renders the page, then hands the reply to HttpSend.
type page struct {
	app  *App
	kind Kind
	args pageArgs
	send sink.Sink
	log  *slog.Logger
	dg   degrader
}

func (p *page) Init(c *stage.Context) error {
	p.args = pageArgs{Send: haboob.StageHttpSend, RetryAfter: time.Second}
	if err := c.DecodeArgs(&p.args); err != nil {
		return err
	}
	var err error
	if p.send, err = c.Sink(p.args.Send); err != nil {
		return fmt.Errorf("arashi: %s send stage: %w", p.kind.Handler(), err)
	}
	p.log = p.app.opts.Logger.With("stage", c.Stage().Name())
	return p.initDegrade(c)
}

func (p *page) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		req, ok := e.(*http.Request)
		if !ok {
			p.log.Warn("arashi: unexpected event", "type", fmt.Sprintf("%T", e))
			continue
		}
		began := time.Now()
		resp := p.serve(req)
		if p.app.timing.Load() && !req.Received.IsZero() {
			p.app.record(p.kind, Timing{Before: began.Sub(req.Received), Service: time.Since(began)})
		}
		if p.dg.deg != nil {
			resp.Header.Add("X-Quality", strconv.FormatFloat(p.dg.deg.Quality(), 'f', 3, 64))
		}
		if resp.Header.Get("Cache-Control") == "" {
			resp.Header.Add("Cache-Control", "no-store")
		}
		if err := p.send.Enqueue(&http.Reply{Req: req, Resp: resp}); err != nil {
			if c, ok := req.Conn.(*http.Connection); ok {
				_ = c.Reject(req, p.args.RetryAfter)
			}
		}
	}
	return nil
}

// view is what the templates render.
type view struct {
	Title, Text string
	User, Key   string
	Folder      Folder
	Folders     []Folder
	Messages    []Message
	Message     Message
	Query, Sort string
	First, Last int
	Prev, Next  bool
	PrevPage    int
	NextPage    int
	// Degraded: the page was made at a quality below 1; NoCounts: the
	// folders page leaves the message counts out.
	Degraded, NoCounts bool
}

func (p *page) serve(req *http.Request) *http.Response {
	form := formValues(req)
	ctx, cancel := context.WithTimeout(context.Background(), p.app.opts.Timeout)
	defer cancel()
	db := p.app.opts.DB
	if p.kind == Login && req.Path == "/logout" {
		// The Login stage also ends sessions: /logout?s=KEY forgets KEY
		// and goes back to the login page, whether KEY was live or not.
		p.app.endSession(form.Get("s"))
		return redirect("/")
	}
	if p.kind == Login {
		name := form.Get("user")
		id, err := db.Login(ctx, name, form.Get("password"))
		if err != nil {
			return p.fail(err, "Login failed", "Unknown user or wrong password.")
		}
		key := p.app.newSession(id, name)
		return redirect(fmt.Sprintf("/folders?s=%016x", key))
	}
	s, ok := p.app.session(form.Get("s"))
	if !ok {
		return p.render(http.StatusForbidden, "error", view{Title: "Session expired", Text: "Please log in again."})
	}
	v := view{User: s.name, Key: form.Get("s")}
	q := p.quality()
	v.Degraded = q < 1
	switch p.kind {
	case ListFolders:
		var fs []Folder
		var err error
		if withCounts(q) {
			fs, err = db.Folders(ctx, s.user)
		} else {
			fs, err = db.FolderNames(ctx, s.user)
			v.NoCounts = true
		}
		if err != nil {
			return p.fail(err, "", "")
		}
		v.Title, v.Folders = "Folders", fs
		return p.render(http.StatusOK, "folders", v)
	case ListMessages:
		fid, _ := strconv.ParseInt(form.Get("f"), 10, 64)
		pg, _ := strconv.Atoi(form.Get("page"))
		pg = max(pg, 0)
		f, err := db.Folder(ctx, s.user, fid)
		if err != nil {
			return p.fail(err, "No such folder", "")
		}
		order := Sort(form.Get("sort"))
		if order != BySender && order != BySubject {
			order = ByDate
		}
		n := pageSize(q)
		ms, err := db.Messages(ctx, s.user, fid, order, pg*n, n)
		if err != nil {
			return p.fail(err, "", "")
		}
		v.Title, v.Folder, v.Messages, v.Sort = f.Name, f, ms, string(order)
		v.First, v.Last = pg*n+1, pg*n+len(ms)
		v.Prev, v.PrevPage = pg > 0, pg-1
		v.Next, v.NextPage = v.Last < f.Count, pg+1
		return p.render(http.StatusOK, "list", v)
	case ShowMessage:
		id, _ := strconv.ParseInt(form.Get("m"), 10, 64)
		m, err := db.Message(ctx, s.user, id)
		if err != nil {
			return p.fail(err, "No such message", "")
		}
		fs, err := db.FolderNames(ctx, s.user)
		if err != nil {
			return p.fail(err, "", "")
		}
		v.Title, v.Message, v.Folders = m.Subject, m, fs
		return p.render(http.StatusOK, "show", v)
	case Delete, Refile:
		if req.Method != "POST" {
			return methodNotAllowed()
		}
		id, _ := strconv.ParseInt(form.Get("m"), 10, 64)
		var from int64
		var err error
		if p.kind == Delete {
			from, err = db.Delete(ctx, s.user, id)
		} else {
			to, _ := strconv.ParseInt(form.Get("to"), 10, 64)
			from, err = db.Refile(ctx, s.user, id, to)
		}
		if err != nil {
			return p.fail(err, "No such message or folder", "")
		}
		// Back to the page the user came from (thesis Fig. 46).
		return redirect(fmt.Sprintf("/list?s=%s&f=%d", v.Key, from))
	case Search:
		query := form.Get("q")
		ms, err := db.Search(ctx, s.user, query, pageSize(q))
		if err != nil {
			return p.fail(err, "", "")
		}
		v.Title, v.Query, v.Messages = "Search", query, ms
		return p.render(http.StatusOK, "search", v)
	case Compose:
		if req.Path != "/send" {
			v.Title = "Compose"
			return p.render(http.StatusOK, "compose", v)
		}
		if req.Method != "POST" {
			return methodNotAllowed()
		}
		err := db.Send(ctx, s.user, strings.TrimSuffix(form.Get("to"), "@arashi.example"), form.Get("subject"), form.Get("body"), time.Now())
		if err != nil {
			return p.fail(err, "Not sent", "No such recipient.")
		}
		return redirect("/folders?s=" + v.Key)
	}
	return http.NotFound()
}

// fail renders an error page: 404 for ErrNotFound (403 for a failed
// login), else 500 (logged).
func (p *page) fail(err error, title, msg string) *http.Response {
	if errors.Is(err, ErrNotFound) {
		status := http.StatusNotFound
		if p.kind == Login {
			status = http.StatusForbidden
		}
		if msg == "" {
			msg = "It does not exist, or it is not yours."
		}
		return p.render(status, "error", view{Title: title, Text: msg})
	}
	p.log.Error("arashi: request failed", "kind", p.kind.String(), "err", err)
	return p.render(http.StatusInternalServerError, "error", view{Title: "Internal error", Text: "The mail store failed; try again."})
}

func (p *page) render(status int, name string, v view) *http.Response {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, v); err != nil {
		p.log.Error("arashi: template", "name", name, "err", err)
		return http.InternalServerError()
	}
	return http.NewResponse(status, "text/html; charset=utf-8", b.Bytes())
}

func redirect(location string) *http.Response {
	return http.Redirect(location, http.StatusSeeOther)
}

func methodNotAllowed() *http.Response {
	r := http.StatusResponse(http.StatusMethodNotAllowed)
	r.Header.Add("Allow", "POST")
	return r
}

// formValues merges the query and, for a form POST, the body.
func formValues(req *http.Request) url.Values {
	v := req.Query()
	if req.Method == "POST" && len(req.Body) > 0 {
		if ct := req.Header.Get("Content-Type"); ct == "" || strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
			if b, err := url.ParseQuery(string(req.Body)); err == nil {
				for k, vs := range b {
					v[k] = append(v[k], vs...)
				}
			}
		}
	}
	return v
}
