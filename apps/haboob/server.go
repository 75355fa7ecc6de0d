package haboob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/http/accesslog"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Handler names in a Registry (see Server.Register).
const (
	HandlerHttpRecv  = "haboob.HttpRecv"
	HandlerPageCache = "haboob.PageCache"
	HandlerCacheMiss = "haboob.CacheMiss"
	HandlerHttpSend  = "haboob.HttpSend"
	HandlerChecksum  = "haboob.Checksum"
)

// Default stage names, as wired in configs/haboob.yaml.
const (
	StageHttpRecv  = "HttpRecv"
	StagePageCache = "PageCache"
	StageCacheMiss = "CacheMiss"
	StageHttpSend  = "HttpSend"
)

// ServerHeader is the Server field of Haboob's responses.
const ServerHeader = "Haboob"

// ErrNotStarted is returned when the HttpRecv stage has not opened the
// server socket yet.
var ErrNotStarted = errors.New("haboob: server not started")

// Options are set from Go (the command's flags) and win over the stages'
// args in the configuration file.
type Options struct {
	// Root is the document root; it overrides CacheMiss's `root` arg.
	Root string
	// Addr is the listen address; it overrides HttpRecv's socket address.
	Addr string
	// TLSAddr, TLSCert and TLSKey override HttpRecv's `tls:` args: an
	// HTTPS listener beside the HTTP one (no certificate: a self-signed
	// one for localhost).
	TLSAddr, TLSCert, TLSKey string
	// DisableHTTP2 turns HTTP/2 off: the HTTPS listener offers only
	// http/1.1 by ALPN (it offers h2 first by default) and the HTTP one
	// does not accept h2c.
	DisableHTTP2 bool
	// Logger receives Haboob's logs (nil: the manager's).
	Logger *slog.Logger
	// AccessLog, if set, gets one record for every response HttpRecv's
	// servers send, HTTP and HTTPS, rejections and errors included
	// (http.ServerConfig.OnResponse); the statistics page shows its
	// counts. The owner closes it after the server's Shutdown.
	AccessLog *accesslog.Log
	// Principal, if set, is asked for every request HttpRecv's servers
	// parse (HTTP and HTTPS), after the `principal:` block's client
	// policy has given the request its client's address as principal: if
	// it returns ok, its principal (an enqueuepred.Principal, a string
	// ID, ...; see http.Request.SetPrincipal) replaces the address, so the
	// admission predicates of every stage the request reaches see it
	// (Arashi's logged-in user, say). Otherwise the address stays. It runs
	// on the socket's event loop: it must be quick and must not block.
	Principal func(*http.Request) (principal any, ok bool)
}

// Server is one Haboob instance: the state its stages share (the HTTP
// server, the page cache, the document root) and the handler factories
// that build its stages. Register the factories, build the manager from a
// configuration (configs/haboob.yaml), start it; the HttpRecv stage opens
// the socket. The owner closes the HTTP server with Shutdown (or Close)
// before the manager's Shutdown.
type Server struct {
	opts    Options
	started time.Time

	mu        sync.Mutex
	http      *http.Server
	https     *http.Server   // nil without HTTPS
	certs     *aio.CertStore // HTTPS certificates (Reload on SIGHUP)
	cache     *PageCache
	gz        *gzipper
	site      *Site
	checksums []*checksum
	// cacheView is the PageCache stage's cache, for HttpRecv's Combine
	// path (set once PageCache is initialized).
	cacheView atomic.Pointer[cacheView]
}

// New returns a Haboob instance.
func New(o Options) *Server { return &Server{opts: o, started: time.Now()} }

// Register adds Haboob's handlers to r: haboob.HttpRecv, haboob.PageCache,
// haboob.CacheMiss, haboob.HttpSend and the dynamic handler
// haboob.Checksum.
func (s *Server) Register(r *stage.Registry) {
	r.Register(HandlerHttpRecv, func() stage.Handler { return &httpRecv{srv: s} })
	r.StageArgs(HandlerHttpRecv, "routes.*", "static", "send")
	r.Register(HandlerPageCache, func() stage.Handler { return &pageCache{srv: s} })
	r.StageArgs(HandlerPageCache, "miss", "send")
	r.Register(HandlerCacheMiss, func() stage.Handler { return &cacheMiss{srv: s} })
	r.StageArgs(HandlerCacheMiss, "send")
	r.Register(HandlerHttpSend, func() stage.Handler { return &httpSend{srv: s} })
	r.Register(HandlerChecksum, func() stage.Handler { return &checksum{srv: s} })
	r.StageArgs(HandlerChecksum, "send")
}

// HTTP returns the HTTP server, once HttpRecv has started it.
func (s *Server) HTTP() (*http.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.http == nil {
		return nil, ErrNotStarted
	}
	return s.http, nil
}

// Addr is the address the server listens on, or nil before it started.
func (s *Server) Addr() net.Addr {
	if h, err := s.HTTP(); err == nil {
		return h.Addr()
	}
	return nil
}

// Cache returns the page cache, once PageCache is initialized.
func (s *Server) Cache() *PageCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cache
}

// Compression returns the counters of on-the-fly compression (zero
// before PageCache is initialized).
func (s *Server) Compression() CompressionStats {
	s.mu.Lock()
	g := s.gz
	s.mu.Unlock()
	return g.stats()
}

// Shutdown closes the HTTP server gracefully (see http.Server.Shutdown).
// Call it before the manager's Shutdown: the responses the server owes
// (a file being streamed through asyncFile) need the stages running.
// After the manager's Shutdown it still works, but streamed responses
// still in progress are cut short. It is a no-op if the server never
// started.
func (s *Server) Shutdown(ctx context.Context) error {
	if h, err := s.HTTPS(); err == nil {
		if err := h.Shutdown(ctx); err != nil {
			return err
		}
	}
	h, err := s.HTTP()
	if err != nil {
		return nil
	}
	return h.Shutdown(ctx)
}

// Close closes the HTTP server and its connections now.
func (s *Server) Close() error {
	if h, err := s.HTTPS(); err == nil {
		_ = h.Close()
	}
	h, err := s.HTTP()
	if err != nil {
		return nil
	}
	return h.Close()
}

func (s *Server) setHTTP(h *http.Server) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.http != nil {
		return fmt.Errorf("haboob: a second HttpRecv stage in one Server (one socket per instance)")
	}
	s.http = h
	return nil
}

// send hands a reply to the HttpSend stage; if that stage rejects it, the
// client gets 503 at once, written directly on its connection.
func send(out sendFunc, r *http.Reply, retryAfter time.Duration) {
	if err := out(r); err == nil {
		return
	} else if r.Done != nil {
		r.Done(err)
	}
	unavailable(r.Req, retryAfter)
}

// unavailable answers req with 503 directly on its connection, counted
// as a rejection in the server's statistics.
func unavailable(req *http.Request, retryAfter time.Duration) {
	if c, ok := req.Conn.(*http.Connection); ok {
		_ = c.Reject(req, retryAfter)
	}
}

// logger returns the logger for a stage.
func (s *Server) logger(c *stage.Context) *slog.Logger {
	if s.opts.Logger != nil {
		return s.opts.Logger.With("stage", c.Stage().Name())
	}
	return c.Logger()
}

func isClosed(err error) bool { return errors.Is(err, sink.ErrClosed) }
