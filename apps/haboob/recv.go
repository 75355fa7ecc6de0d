package haboob

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// recvArgs are HttpRecv's args.
type recvArgs struct {
	// Socket names the socket in `global.aio.sockets` whose configuration
	// the server uses (default "http").
	Socket string `yaml:"socket"`
	// Addr overrides the socket's address.
	Addr           string        `yaml:"addr"`
	MaxConnections int           `yaml:"maxConnections"`
	RequestTimeout time.Duration `yaml:"requestTimeout"`
	IdleTimeout    time.Duration `yaml:"idleTimeout"`
	WriteTimeout   time.Duration `yaml:"writeTimeout"`
	// ResponseTimeout bounds how long a request may wait for its answer
	// inside the server (lost events never hang a client).
	ResponseTimeout time.Duration `yaml:"responseTimeout"`
	MaxPipeline     int           `yaml:"maxPipeline"`
	// RetryAfter is the Retry-After of 503 answers (default 1s).
	RetryAfter time.Duration `yaml:"retryAfter"`
	// Stats is the path of the statistics page ("" for none).
	Stats string `yaml:"stats"`
	// StatsAccess says who may read it: "loopback" (default) or "public".
	StatsAccess string `yaml:"statsAccess"`
	// Routes maps URL prefixes to dynamic handler stages; the longest
	// matching prefix wins. Prefixes match whole path segments: "/api/"
	// matches the paths under /api/, and "/api" matches /api itself and
	// the paths under /api/, not /apiary. Other paths are static.
	Routes map[string]string `yaml:"routes"`
	// Static and Send name the page cache and the sending stages.
	Static string `yaml:"static"`
	Send   string `yaml:"send"`
	// Combine answers a GET or HEAD whose page is in the page cache, and
	// fresh (checked against its file within PageCache's `revalidate`),
	// where the request is parsed, on the socket's event loop, instead of
	// passing it through the HttpRecv, PageCache and HttpSend stages (the
	// thesis's Combine pattern). Misses, pages due for revalidation,
	// dynamic routes, the statistics page and other methods take the
	// stages as before, and so does everything while HttpRecv, PageCache
	// or the stage PageCache sends through has an admission predicate, or
	// if that stage is not an HttpSend.
	// Requests answered this way are counted as HttpRecv's
	// `requests.inline` (profiler, metrics, /stats). Default true: at 64
	// connections it costs less CPU and fewer context switches per
	// request; at 1024 it gains nothing (docs/haboob-bench.md).
	Combine bool `yaml:"combine"`
	// TLS opens an HTTPS listener beside the HTTP one.
	TLS tlsArgs `yaml:"tls"`
	// Principal says who a request's client is (its principal, for the
	// account and session predicates and `ordering: principal`) and
	// whose X-Class header counts; see principalArgs.
	Principal principalArgs `yaml:"principal"`
}

// principalArgs are HttpRecv's `principal` block: an http.ClientPolicy.
//
//	principal:
//	  from: addr              # addr (default): the peer's IP address;
//	                          # header: the client a trusted proxy names
//	  header: X-Forwarded-For # or X-Real-IP, Forwarded (default XFF)
//	  trustedProxies: [127.0.0.1/32, 10.0.0.0/8]
//	  class: trusted          # who may send X-Class: trusted (default),
//	                          # any (before principals), none
type principalArgs struct {
	From           string        `yaml:"from"`
	Header         string        `yaml:"header"`
	TrustedProxies []proxyPrefix `yaml:"trustedProxies"`
	Class          string        `yaml:"class"`
}

// proxyPrefix is a trusted proxy's CIDR prefix or address, checked where
// the file gives it.
type proxyPrefix netip.Prefix

func (p *proxyPrefix) UnmarshalText(b []byte) error {
	pf, err := http.ParseTrustedProxy(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a CIDR prefix (10.0.0.0/8) or an address", b)
	}
	*p = proxyPrefix(pf)
	return nil
}

// policy checks the block and returns the HTTP server's client policy.
func (a principalArgs) policy(c *stage.Context) (*http.ClientPolicy, error) {
	cp := &http.ClientPolicy{
		From:   http.PrincipalSource(a.From),
		Header: a.Header,
		Class:  http.ClassTrust(a.Class),
	}
	for _, p := range a.TrustedProxies {
		cp.TrustedProxies = append(cp.TrustedProxies, netip.Prefix(p))
	}
	switch cp.From {
	case "", http.PrincipalFromAddr:
	case http.PrincipalFromHeader:
		if len(cp.TrustedProxies) == 0 {
			return nil, c.ArgError(errors.New("from: header needs trustedProxies (nobody's header would be believed)"), "principal", "from")
		}
	default:
		return nil, c.ArgError(fmt.Errorf("must be addr or header, got %q", a.From), "principal", "from")
	}
	switch cp.Class {
	case "", http.ClassFromTrusted, http.ClassFromAny, http.ClassFromNone:
	default:
		return nil, c.ArgError(fmt.Errorf("must be trusted, any or none, got %q", a.Class), "principal", "class")
	}
	if err := cp.Validate(); err != nil {
		return nil, c.ArgError(err, "principal", "header")
	}
	return cp, nil
}

type route struct {
	prefix string
	stage  string
	sink   sink.Sink
}

// httpRecv is the HttpRecv stage: it opens the HTTP server, receives every
// parsed request and dispatches it by URL to the page cache, a dynamic
// handler stage or the statistics page. On static paths, methods other
// than GET and HEAD get 405 with Allow if HTTP defines them, and 501 if
// they are unknown (RFC 9110 §9.1).
type httpRecv struct {
	srv    *Server
	m      *stage.Manager
	log    *slog.Logger
	args   recvArgs
	routes []route // longest prefix first
	static sink.Sink
	send   sendFunc
	self   sink.Sink // this stage's sink, for the Combine path
	// clients is the HTTP server's client policy (principal block).
	clients *http.ClientPolicy
	inline  atomic.Uint64 // requests answered by the Combine path
}

func (h *httpRecv) Init(c *stage.Context) error {
	h.m = c.Manager()
	h.log = h.srv.logger(c)
	h.args = recvArgs{Socket: "http", Stats: "/stats", StatsAccess: StatsLoopback, Static: StagePageCache, Send: StageHttpSend, RetryAfter: time.Second, Combine: true}
	if err := c.DecodeArgs(&h.args); err != nil {
		return err
	}
	a := &h.args
	if a.MaxConnections < 0 {
		return c.ArgError(fmt.Errorf("must not be negative, got %d", a.MaxConnections), "maxConnections")
	}
	if a.MaxPipeline < 0 {
		return c.ArgError(fmt.Errorf("must not be negative, got %d", a.MaxPipeline), "maxPipeline")
	}
	if a.Stats != "" && !strings.HasPrefix(a.Stats, "/") {
		return c.ArgError(fmt.Errorf("stats path %q must start with /", a.Stats), "stats")
	}
	if err := checkStatsAccess(a.StatsAccess); err != nil {
		return err
	}
	clients, err := a.Principal.policy(c)
	if err != nil {
		return err
	}
	h.clients = clients
	// Context.Sink locates a missing stage named in the args itself.
	if h.static, err = c.Sink(a.Static); err != nil {
		return err
	}
	if h.send, err = stageSend(c, a.Send); err != nil {
		return fmt.Errorf("haboob: HttpRecv send stage: %w", err)
	}
	for prefix, name := range a.Routes {
		if !strings.HasPrefix(prefix, "/") {
			return c.ArgError(fmt.Errorf("prefix must start with /, got %q", prefix), "routes", prefix)
		}
		s, err := c.Sink(name)
		if err != nil {
			return err
		}
		h.routes = append(h.routes, route{prefix: prefix, stage: name, sink: s})
	}
	slices.SortFunc(h.routes, func(a, b route) int { return len(b.prefix) - len(a.prefix) })

	acfg, err := aio.ConfigOf(h.m)
	if err != nil {
		return err
	}
	sock, _ := acfg.Socket(a.Socket)
	switch {
	case h.srv.opts.Addr != "":
		sock.Addr = h.srv.opts.Addr
	case a.Addr != "":
		sock.Addr = a.Addr
	case sock.Addr == "":
		sock.Addr = "127.0.0.1:8080"
	}
	if sock.MaxConnections == 0 && a.MaxConnections > 0 {
		sock.MaxConnections = overLimitRoom(a.MaxConnections)
	}
	hcfg := http.ServerConfig{
		Socket:          sock,
		Name:            a.Socket,
		ServerHeader:    ServerHeader,
		MaxConnections:  a.MaxConnections,
		RequestTimeout:  a.RequestTimeout,
		IdleTimeout:     a.IdleTimeout,
		WriteTimeout:    a.WriteTimeout,
		ResponseTimeout: a.ResponseTimeout,
		MaxPipeline:     a.MaxPipeline,
		RetryAfter:      a.RetryAfter,
		SkipBody:        h.skipBody,
		Clients:         clients,
		InlineBody:      inlineBody,
	}
	if al := h.srv.opts.AccessLog; al != nil {
		hcfg.OnResponse = al.Record
	}
	if f := h.srv.opts.Principal; f != nil {
		hcfg.Principal = func(r *http.Request) any {
			if p, ok := f(r); ok {
				return p
			}
			return r.PrincipalValue()
		}
	}
	c.Profile("requests.inline", func() float64 { return float64(h.inline.Load()) })
	hcfg.HTTP2.Disable = h.srv.opts.DisableHTTP2
	if a.Combine {
		h.self = c.Stage().Sink()
		hcfg.Inline = h.answerInline
		// answerInline keeps nothing of a request it answers: the reply
		// points to the page's or open file's own response, and the
		// revalidation it may hand CacheMiss carries the page or file.
		hcfg.RecycleInline = true
	}
	hs, err := http.Listen(hcfg, c.Stage().Sink(), h.env())
	if err != nil {
		return err
	}
	if err := h.srv.setHTTP(hs); err != nil {
		_ = hs.Close()
		return err
	}
	h.log.Info("haboob: listening", "addr", hs.Addr().String())
	return h.listenTLS(c, hcfg)
}

// inlineBody is the largest body HttpRecv's server copies into the
// response's header buffer. A cached page is the page cache's own buffer,
// held until written: above a few hundred bytes, writing it beside the
// header (writev) costs less than copying it into a new buffer per
// response and collecting that garbage (2026-11-27, the SPECweb99-like
// mix at 64 connections: 13 against 16 µs of CPU per request with the
// http package's 16 KiB default; see docs/haboob-bench.md).
const inlineBody = 512

func (h *httpRecv) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		req, ok := e.(*http.Request)
		if !ok {
			h.log.Warn("haboob: HttpRecv: unexpected event", "type", fmt.Sprintf("%T", e))
			continue
		}
		h.dispatch(req)
	}
	return nil
}

func (h *httpRecv) dispatch(req *http.Request) {
	retry := h.args.RetryAfter
	path := req.Path
	if h.args.Stats != "" && path == h.args.Stats {
		send(h.send, &http.Reply{Req: req, Resp: h.statsPage(req)}, retry)
		return
	}
	for _, r := range h.routes {
		if routeMatches(r.prefix, path) {
			if err := r.sink.Enqueue(req); err != nil {
				unavailable(req, retry)
			}
			return
		}
	}
	switch {
	case path == "" || path[0] != '/':
		send(h.send, &http.Reply{Req: req, Resp: http.BadRequest()}, retry)
	case req.Method != "GET" && req.Method != "HEAD":
		resp := http.StatusResponse(http.StatusNotImplemented)
		if knownMethod(req.Method) {
			resp = http.StatusResponse(http.StatusMethodNotAllowed)
			resp.Header.Add("Allow", "GET, HEAD")
		}
		send(h.send, &http.Reply{Req: req, Resp: resp}, retry)
	default:
		if err := h.static.Enqueue(req); err != nil {
			unavailable(req, retry)
		}
	}
}

// skipBody tells the HTTP server which bodies nobody reads: those of
// requests that do not go to a dynamic stage (static files and the
// statistics page answer from the path and method alone). They are not
// buffered; the answer (405 for a POST) closes the connection.
func (h *httpRecv) skipBody(req *http.Request) bool {
	for _, r := range h.routes {
		if routeMatches(r.prefix, req.Path) {
			return false
		}
	}
	return true
}

// routeMatches reports whether a route's prefix covers path, on path
// segment boundaries: a prefix ending in "/" matches its subtree; one
// without matches itself and its subtree.
func routeMatches(prefix, path string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return strings.HasSuffix(prefix, "/") || len(path) == len(prefix) || path[len(prefix)] == '/'
}

// knownMethod reports the methods HTTP defines (RFC 9110 §9, RFC 5789):
// a static server answers them 405, others 501.
func knownMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH":
		return true
	}
	return false
}
