package haboob

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
)

// overLimitRoom is the socket's hard limit for HttpRecv's maxConnections
// n: a tenth more (at least 16) are accepted only to be answered 503 with
// Retry-After; beyond that a connection is closed as soon as it is
// accepted (aio.SocketConfig.MaxConnections), so that clients over the
// limit cannot hold the descriptors the served ones need.
func overLimitRoom(n int) int { return n + max(n/10, 16) }

// Who may read the statistics page (HttpRecv's statsAccess).
const (
	// StatsLoopback (the default) answers the page to clients on a
	// loopback address only (127.0.0.0/8, ::1, Unix sockets); others get
	// 403. Behind a trusted proxy (principal: {from: header}) the address
	// is the client's the proxy names. The page tells a visitor the server's load, its cache and its
	// stages, which is not for the public.
	StatsLoopback = "loopback"
	// StatsPublic answers the page to every client.
	StatsPublic = "public"
)

// checkStatsAccess validates HttpRecv's statsAccess.
func checkStatsAccess(v string) error {
	if v != StatsLoopback && v != StatsPublic {
		return fmt.Errorf("haboob: HttpRecv: statsAccess %q: want %s or %s", v, StatsLoopback, StatsPublic)
	}
	return nil
}

// statsAllowed reports whether req may read the statistics page.
func (h *httpRecv) statsAllowed(req *http.Request) bool {
	if h.args.StatsAccess == StatsPublic {
		return true
	}
	c, ok := req.Conn.(*http.Connection)
	if !ok {
		return false
	}
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		// Behind a trusted proxy on this host (principal: {from: header}),
		// the client is the one the proxy names, not the proxy.
		peer, _ := netip.AddrFromSlice(a.IP)
		return h.clients.Client(peer, req.Header).IsLoopback()
	case *net.UnixAddr:
		return true // a local process
	}
	return false
}

// statsPage renders the statistics page: one "name value" line per
// counter, for people and scripts alike; 403 for a client statsAccess
// does not admit.
func (h *httpRecv) statsPage(req *http.Request) *http.Response {
	if !h.statsAllowed(req) {
		return http.Forbidden()
	}
	var b strings.Builder
	line := func(name string, v any) { fmt.Fprintf(&b, "%s %v\n", name, v) }
	line("uptime", time.Since(h.srv.started).Round(time.Millisecond))
	if al := h.srv.opts.AccessLog; al != nil {
		st := al.Stats()
		line("accesslog.written", st.Written)
		line("accesslog.dropped", st.Dropped)
		line("accesslog.errors", st.Errors)
	}
	if hs, err := h.srv.HTTP(); err == nil {
		st := hs.Stats()
		line("http.connections.open", st.Open)
		line("http.connections.accepted", st.Accepted)
		line("http.connections.overLimit", st.OverLimit)
		line("http.requests", st.Requests)
		line("http.requests.rejected", st.Rejected)
		line("http.responses", st.Responses)
		for class := 1; class < len(st.ByClass); class++ {
			line(fmt.Sprintf("http.responses.%dxx", class), st.ByClass[class])
		}
		line("http.errors.parse", st.ParseErrors)
		line("http.timeouts.request", st.RequestTimeouts)
		line("http.timeouts.response", st.ResponseTimeouts)
		line("http.closed.idle", st.IdleClosed)
		h2Lines(line, "http.h2", st.HTTP2)
	}
	if hs, err := h.srv.HTTPS(); err == nil {
		h2Lines(line, "https.h2", hs.Stats().HTTP2)
	}
	line("requests.inline", h.inline.Load())
	if c := h.srv.Cache(); c != nil {
		st := c.Stats()
		line("cache.pages", st.Pages)
		line("cache.bytes", st.Bytes)
		line("cache.maxBytes", st.MaxBytes)
		line("cache.hits", st.Hits)
		line("cache.misses", st.Misses)
		line("cache.evictions", st.Evictions)
		line("cache.reused", st.Reused)
		handed, lost, checks, gone := c.due.counts()
		line("revalidate.checks", checks)
		line("revalidate.handoffs", handed)
		line("revalidate.lost", lost)
		line("revalidate.gone", gone)
	}
	h.srv.mu.Lock()
	site := h.srv.site
	h.srv.mu.Unlock()
	if site != nil {
		line("revalidate.lstats", site.checks.lstats.Load())
		line("revalidate.dirsReused", site.checks.reused.Load())
		line("revalidate.listings", site.checks.listings.Load())
		line("revalidate.dirsUnshared", site.checks.unshared.Load())
	}
	gz := h.srv.Compression()
	line("gzip.compressions", gz.Compressions)
	line("gzip.bytesIn", gz.BytesIn)
	line("gzip.bytesOut", gz.BytesOut)
	for _, s := range h.m.Stages() {
		st := s.Stats()
		rejected := st.RejectedFull + st.RejectedPredicate + st.RejectedClosed
		fmt.Fprintf(&b, "stage.%s queue=%d threads=%d batch=%d events=%d rejected=%d failures=%d\n",
			s.Name(), st.QueueLen, st.PoolSize, st.BatchSize, st.Events, rejected, st.Failures)
	}
	h.srv.mu.Lock()
	sums := append([]*checksum(nil), h.srv.checksums...)
	h.srv.mu.Unlock()
	for _, c := range sums {
		line("dynamic."+c.name+".quality", fmt.Sprintf("%.3f", c.deg.Quality()))
		if rt := c.deg.ResponseTime(); rt != nil {
			line("dynamic."+c.name+".p90", rt.P90())
			line("dynamic."+c.name+".target", rt.Target())
			line("dynamic."+c.name+".admission", rt.Enabled())
		}
	}
	resp := http.OK("text/plain; charset=utf-8", []byte(b.String()))
	resp.Header.Add("Cache-Control", "no-store")
	return resp
}

// h2Lines renders a server's HTTP/2 counters (http.H2Stats) under prefix.
func h2Lines(line func(string, any), prefix string, st http.H2Stats) {
	for _, c := range []struct {
		name string
		v    uint64
	}{
		{"connections", st.Connections}, {"streams", st.Streams}, {"refused", st.Refused},
		{"resets.in", st.ResetsIn}, {"resets.out", st.ResetsOut}, {"goaways", st.GoAways},
		{"bounded.resets", st.TooManyResets}, {"bounded.control", st.ControlFlood},
		{"bounded.continuations", st.Continuations}, {"bounded.headers", st.HeaderListLarge},
		{"errors.hpack", st.HPACKErrors}, {"errors.protocol", st.ProtocolErrors},
		{"timeouts.write", st.WriteStalls},
	} {
		line(prefix+"."+c.name, c.v)
	}
}
