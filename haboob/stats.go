package haboob

import (
	"fmt"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
)

// statsPage renders the statistics page: one "name value" line per
// counter, for people and scripts alike.
func (h *httpRecv) statsPage(*http.Request) *http.Response {
	var b strings.Builder
	line := func(name string, v any) { fmt.Fprintf(&b, "%s %v\n", name, v) }
	line("uptime", time.Since(h.srv.started).Round(time.Millisecond))
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
	}
	if c := h.srv.Cache(); c != nil {
		st := c.Stats()
		line("cache.pages", st.Pages)
		line("cache.bytes", st.Bytes)
		line("cache.maxBytes", st.MaxBytes)
		line("cache.hits", st.Hits)
		line("cache.misses", st.Misses)
		line("cache.evictions", st.Evictions)
		line("cache.reused", st.Reused)
	}
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
		line("dynamic."+c.name+".p90", c.rt.P90())
		line("dynamic."+c.name+".admission", c.rt.Enabled())
	}
	resp := http.OK("text/plain; charset=utf-8", []byte(b.String()))
	resp.Header.Add("Cache-Control", "no-store")
	return resp
}
