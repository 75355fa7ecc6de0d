// Package load is the Arashi client load generator of the SEDA thesis
// (§6.3.4): emulated users, each on its own keep-alive connection, follow
// the Markov model of the thesis's Fig. 46 (probabilities from the UC
// Berkeley IMAP traces), think 20 ms between requests, find the links to
// follow in the marked tags of each page (data-f, data-m), and back off
// exponentially after a 503, then log in again. A user's class travels in
// the X-Class header.
//
// Use Run: it drives the service until its context ends and returns every
// request's Sample; Summarize and the helpers turn them into figures.
//
// The model has no compose/send state (nor does the thesis's); after a
// delete or a refile the user goes back to the list it came from.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	nethttp "net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/internal/clock"
)

// Transitions is the thesis's Fig. 46: the probability of going from a
// state (first index) to the next (second). Rows of delete and refile are
// empty: the user returns to the page it came from.
var Transitions = [...][8]float64{
	arashi.Login:        {arashi.ListFolders: 1},
	arashi.ListFolders:  {arashi.ListMessages: 1},
	arashi.ListMessages: {arashi.Login: 0.27, arashi.ShowMessage: 0.68, arashi.Delete: 0.02, arashi.Refile: 0.02, arashi.Search: 0.01},
	arashi.ShowMessage:  {arashi.Login: 0.03, arashi.ListMessages: 0.58, arashi.Delete: 0.18, arashi.Refile: 0.20, arashi.Search: 0.01},
	arashi.Search:       {arashi.Login: 0.27, arashi.ShowMessage: 0.68, arashi.Delete: 0.02, arashi.Refile: 0.02, arashi.Search: 0.01},
	arashi.Delete:       {},
	arashi.Refile:       {},
	arashi.Compose:      {},
}

// Config configures Run. Zero fields take the defaults shown.
type Config struct {
	Addr     string // the service, host:port (required)
	Users    int    // emulated users (default 1)
	Accounts int    // generated accounts; user i logs in as account 1 + i mod Accounts (default 64)
	// Class gives user i's class (the X-Class header); nil: class 0 and
	// no header.
	Class func(i int) int
	// Start delays user i's first request (nil: all start at once).
	Start func(i int) time.Duration
	// Stop ends user i's run after this long (nil: at the end of ctx).
	Stop       func(i int) time.Duration
	Think      time.Duration // between requests (default 20ms)
	Backoff    time.Duration // first wait after a 503 (default 250ms), doubled each time
	MaxBackoff time.Duration // (default 8s)
	Timeout    time.Duration // one request (default 60s)
	Seed       uint64
}

// Sample is one request's outcome.
type Sample struct {
	At      time.Duration // when it was sent, since Run began
	Kind    arashi.Kind
	User    int
	Class   int
	Status  int // HTTP status, 0 for a transport error
	Latency time.Duration
}

// Admitted reports whether the service served the request (not 503, not a
// transport error).
func (s Sample) Admitted() bool { return s.Status != 0 && s.Status != 503 }

// Run drives the service until ctx ends (or every user stopped) and
// returns the samples in the order they completed.
func Run(ctx context.Context, cfg Config) ([]Sample, error) {
	if cfg.Addr == "" {
		return nil, errors.New("load: Config.Addr is required")
	}
	if cfg.Users == 0 {
		cfg.Users = 1
	}
	if cfg.Accounts == 0 {
		cfg.Accounts = 64
	}
	if cfg.Think == 0 {
		cfg.Think = 20 * time.Millisecond
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 250 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 8 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.Users < 0 || cfg.Accounts < 1 {
		return nil, fmt.Errorf("load: users %d and accounts %d must be positive", cfg.Users, cfg.Accounts)
	}
	tr := &nethttp.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Users + 16,
		MaxIdleConnsPerHost: cfg.Users + 16,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &nethttp.Client{
		Transport:     tr,
		Timeout:       cfg.Timeout,
		CheckRedirect: func(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse },
	}
	begin := time.Now()
	var mu sync.Mutex
	var samples []Sample
	var wg sync.WaitGroup
	for i := 0; i < cfg.Users; i++ {
		u := &user{cfg: &cfg, client: client, id: i, begin: begin,
			r: rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))}
		if cfg.Class != nil {
			u.class = cfg.Class(i)
		}
		u.record = func(s Sample) {
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			u.run(ctx)
		}()
	}
	wg.Wait()
	return samples, nil
}

// user is one emulated user, run by its own goroutine.
type user struct {
	cfg    *Config
	client *nethttp.Client
	id     int
	class  int
	begin  time.Time
	r      *rand.Rand
	record func(Sample)

	key      string   // session key
	folders  []string // folder ids of the folders page, Inbox first
	folder   string   // the folder listed last
	back     string   // the list or search page to go back to
	messages []string // message ids on the last list or search page
	message  string   // the message shown last
}

var (
	reFolder  = regexp.MustCompile(`class="folder" data-f="(\d+)"`)
	reMessage = regexp.MustCompile(`class="msg" data-m="(\d+)"`)
	words     = []string{"meeting", "paper", "server", "kernel", "deadline", "benchmark", "overload", "walrus", "gnutella", "thesis", "coffee", "quokka"}
)

func (u *user) run(ctx context.Context) {
	if u.cfg.Start != nil {
		if !clock.Sleep(ctx, u.cfg.Start(u.id)) {
			return
		}
	}
	if u.cfg.Stop != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, u.begin.Add(u.cfg.Stop(u.id)))
		defer cancel()
	}
	state := arashi.Login
	backoff := u.cfg.Backoff
	for ctx.Err() == nil {
		status, body := u.do(ctx, state)
		switch {
		case ctx.Err() != nil:
			return
		case status == 503 || status == 0:
			// Rejected (or the connection failed): back off, log in again.
			if !clock.Sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, u.cfg.MaxBackoff)
			state = arashi.Login
			continue
		}
		backoff = u.cfg.Backoff
		state = u.next(state, status, body)
		if !clock.Sleep(ctx, u.cfg.Think) {
			return
		}
	}
}

// next parses the page of state and picks the next state.
func (u *user) next(state arashi.Kind, status int, body string) arashi.Kind {
	if status >= 400 {
		return arashi.Login // lost session or message: start again
	}
	switch state {
	case arashi.ListFolders:
		u.folders = u.folders[:0]
		for _, m := range reFolder.FindAllStringSubmatch(body, -1) {
			u.folders = append(u.folders, m[1])
		}
	case arashi.ListMessages, arashi.Search:
		u.messages = u.messages[:0]
		for _, m := range reMessage.FindAllStringSubmatch(body, -1) {
			u.messages = append(u.messages, m[1])
		}
		u.back = ""
		if state == arashi.Search {
			u.back = "search"
		}
	case arashi.Delete, arashi.Refile:
		if u.back == "search" {
			return arashi.Search
		}
		return arashi.ListMessages
	}
	x := u.r.Float64()
	next := arashi.Login
	for k, p := range Transitions[state] {
		if x < p {
			next = arashi.Kind(k)
			break
		}
		x -= p
	}
	if (next == arashi.ShowMessage || next == arashi.Delete || next == arashi.Refile) && len(u.messages) == 0 {
		return arashi.ListFolders // nothing to open here
	}
	return next
}

// do sends the request of state and reads the page.
func (u *user) do(ctx context.Context, state arashi.Kind) (int, string) {
	base := "http://" + u.cfg.Addr
	method, target, form := "GET", "", url.Values{}
	switch state {
	case arashi.Login:
		name, pw := arashi.Credentials(1 + u.id%u.cfg.Accounts)
		method, target = "POST", "/login"
		form.Set("user", name)
		form.Set("password", pw)
	case arashi.ListFolders:
		target = "/folders?s=" + u.key
	case arashi.ListMessages:
		if len(u.folders) > 0 && (u.folder == "" || u.r.IntN(10) == 0) {
			u.folder = u.folders[0] // mostly the Inbox
			if u.r.IntN(5) == 0 {
				u.folder = u.folders[u.r.IntN(len(u.folders))]
			}
		}
		target = "/list?s=" + u.key + "&f=" + u.folder
	case arashi.ShowMessage:
		u.message = u.pick()
		target = "/show?s=" + u.key + "&m=" + u.message
	case arashi.Delete, arashi.Refile:
		method, target = "POST", "/delete"
		form.Set("s", u.key)
		m := u.pick()
		form.Set("m", m)
		u.messages = slices.DeleteFunc(u.messages, func(x string) bool { return x == m })
		if state == arashi.Refile {
			target = "/refile"
			if len(u.folders) > 0 {
				form.Set("to", u.folders[u.r.IntN(len(u.folders))])
			}
		}
	case arashi.Search:
		target = "/search?s=" + u.key + "&q=" + words[u.r.IntN(len(words))]
	default:
		target = "/folders?s=" + u.key
	}
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(form.Encode())
	}
	req, err := nethttp.NewRequestWithContext(ctx, method, base+target, body)
	if err != nil {
		return 0, ""
	}
	if method == "POST" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if u.cfg.Class != nil {
		req.Header.Set("X-Class", strconv.Itoa(u.class))
	}
	start := time.Now()
	resp, err := u.client.Do(req)
	status, page := 0, ""
	if err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil {
			status, page = resp.StatusCode, string(b)
		}
		if state == arashi.Login && resp.StatusCode == 303 {
			if l, err := url.Parse(resp.Header.Get("Location")); err == nil {
				u.key = l.Query().Get("s")
			}
		}
	}
	if ctx.Err() != nil && status == 0 {
		return 0, "" // cut short by the end of the run: not a sample
	}
	u.record(Sample{At: start.Sub(u.begin), Kind: state, User: u.id, Class: u.class, Status: status, Latency: time.Since(start)})
	return status, page
}

func (u *user) pick() string {
	if len(u.messages) == 0 {
		return "0"
	}
	return u.messages[u.r.IntN(len(u.messages))]
}
