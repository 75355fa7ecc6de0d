package profiler

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"
)

//go:embed dashboard.html
var dashboardHTML []byte

// Paths served by Handler.
const (
	DashboardPath = "/debug/sandstorm/"
	MetricsPath   = "/debug/sandstorm/metrics.json"
	GraphDotPath  = "/debug/sandstorm/graph.dot"
	GraphSVGPath  = "/debug/sandstorm/graph.svg"
	PprofPath     = "/debug/pprof/"
)

// maxWait bounds how long a metrics.json?after= request waits for a new
// sample (a variable for tests).
var maxWait = 10 * time.Second

// Handler returns the profiler's HTTP endpoints on a mux of their own, to
// be served by Start's listener or mounted on an application's server:
//
//	/debug/sandstorm/              the dashboard (one self-contained page)
//	/debug/sandstorm/metrics.json  the latest sample: every stage's values and the traced edges
//	/debug/sandstorm/graph.dot     the stage graph in Graphviz's language
//	/debug/sandstorm/graph.svg     the same rendered by dot (501 when dot is not installed)
//	/debug/pprof/                  net/http/pprof
//	/metrics                       Prometheus text exposition (client_golang)
//	/healthz                       200 "ok" while the process runs
//	/readyz                        200 while serving; 503 while draining (Drain, or the
//	                               manager's Shutdown began) or after a root supervisor gave up
//	/config                        the effective configuration as YAML, secrets redacted
//	                               (see EffectiveConfig)
//
// metrics.json?after=N also lists, under "samples", the kept samples newer
// than N, waiting (up to two intervals) for one when there is none yet:
// this is how the dashboard polls without missing or repeating samples.
func (p *Profiler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+DashboardPath+"{$}", p.serveDashboard)
	mux.HandleFunc("GET "+MetricsPath, p.serveMetrics)
	mux.HandleFunc("GET "+GraphDotPath, p.serveDot)
	mux.HandleFunc("GET "+GraphSVGPath, p.serveSVG)
	mux.Handle("GET "+PrometheusPath, p.prometheusHandler())
	mux.HandleFunc("GET "+HealthzPath, p.serveHealthz)
	mux.HandleFunc("GET "+ReadyzPath, p.serveReadyz)
	mux.HandleFunc("GET "+ConfigPath, p.serveConfig)
	mux.HandleFunc(PprofPath, pprof.Index)
	mux.HandleFunc(PprofPath+"cmdline", pprof.Cmdline)
	mux.HandleFunc(PprofPath+"profile", pprof.Profile)
	mux.HandleFunc(PprofPath+"symbol", pprof.Symbol)
	mux.HandleFunc(PprofPath+"trace", pprof.Trace)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, DashboardPath, http.StatusFound)
	})
	return mux
}

func (p *Profiler) serveDashboard(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// Everything the page needs is in the page: nothing may load from
	// elsewhere.
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:")
	_, _ = w.Write(dashboardHTML)
}

// current returns the latest sample, taking one when the profiler has none
// or is not sampling (Handler mounted without Start).
func (p *Profiler) current() Sample {
	p.mu.Lock()
	running := p.state == 1 && p.cfg.active()
	p.mu.Unlock()
	if running {
		if s, ok := p.Latest(); ok {
			return s
		}
	}
	return p.tick()
}

func (p *Profiler) serveMetrics(w http.ResponseWriter, r *http.Request) {
	var (
		s       Sample
		samples []Sample
		after   uint64
		poll    = r.URL.Query().Has("after")
	)
	if poll {
		var err error
		after, err = strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		if err != nil {
			http.Error(w, "after: want a sample number", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		running := p.state == 1 && p.cfg.active()
		p.mu.Unlock()
		if running {
			p.waitSample(r.Context(), after, min(2*p.cfg.Interval, maxWait))
		}
	}
	s = p.current()
	if poll {
		for _, h := range p.History() {
			if h.Seq > after {
				samples = append(samples, h)
			}
		}
		if len(samples) == 0 && s.Seq > after {
			samples = []Sample{s}
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"interval":`)
	b.WriteString(strconv.FormatFloat(p.cfg.Interval.Seconds(), 'g', -1, 64))
	b.WriteString(`,"dot":`)
	b.WriteString(strconv.FormatBool(DotPath() != ""))
	b.WriteString(`,"sample":`)
	writeSample(&b, &s)
	b.WriteString(`,"edges":[`)
	for i, e := range s.Edges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"from":`)
		writeString(&b, e.From)
		b.WriteString(`,"to":`)
		writeString(&b, e.To)
		b.WriteString(`,"count":`)
		b.WriteString(strconv.FormatUint(e.Count, 10))
		b.WriteByte('}')
	}
	b.WriteByte(']')
	if poll {
		b.WriteString(`,"samples":[`)
		for i := range samples {
			if i > 0 {
				b.WriteByte(',')
			}
			writeSample(&b, &samples[i])
		}
		b.WriteByte(']')
	}
	b.WriteString("}\n")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
}

// writeSample encodes a sample (without its edges) as JSON. Non-finite
// values, which JSON cannot carry, are written as null. In a cluster it
// adds "node", each stage's "nodes" and the stages hosted elsewhere
// ("remote", with their remote sinks' values).
func writeSample(b *bytes.Buffer, s *Sample) {
	b.WriteString(`{"seq":`)
	b.WriteString(strconv.FormatUint(s.Seq, 10))
	b.WriteString(`,"time":`)
	b.WriteString(strconv.FormatFloat(float64(s.Time.UnixMilli())/1000, 'f', 3, 64))
	b.WriteString(`,"process":`)
	writeValues(b, s.Process)
	b.WriteString(`,"stages":[`)
	for i := range s.Stages {
		if i > 0 {
			b.WriteByte(',')
		}
		writeStage(b, &s.Stages[i], s.Node != "")
	}
	b.WriteString(`],"other":`)
	writeValues(b, s.Other)
	if s.Node != "" {
		b.WriteString(`,"node":`)
		writeString(b, s.Node)
		b.WriteString(`,"remote":[`)
		for i := range s.Remote {
			if i > 0 {
				b.WriteByte(',')
			}
			writeStage(b, &s.Remote[i], true)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
}

// writeStage encodes one stage's sample; in a cluster, with its nodes.
func writeStage(b *bytes.Buffer, st *StageSample, cluster bool) {
	b.WriteString(`{"name":`)
	writeString(b, st.Name)
	if cluster {
		b.WriteString(`,"nodes":[`)
		for i, n := range st.Nodes {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, n)
		}
		b.WriteByte(']')
	}
	b.WriteString(`,"values":`)
	writeValues(b, st.Values)
	b.WriteByte('}')
}

func writeValues(b *bytes.Buffer, vs []Value) {
	b.WriteByte('{')
	for i, v := range vs {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, v.Name)
		b.WriteByte(':')
		if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) {
			b.WriteString("null")
		} else {
			b.Write(strconv.AppendFloat(b.AvailableBuffer(), v.Value, 'g', -1, 64))
		}
	}
	b.WriteByte('}')
}

func writeString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // a string always encodes
	b.Write(enc)
}

func (p *Profiler) serveDot(w http.ResponseWriter, r *http.Request) {
	s := p.current()
	w.Header().Set("Content-Type", "text/vnd.graphviz; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(Dot(&s))
}

func (p *Profiler) serveSVG(w http.ResponseWriter, r *http.Request) {
	s := p.current()
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	svg, err := RenderSVG(ctx, Dot(&s))
	switch {
	case errors.Is(err, ErrNoDot):
		http.Error(w, "graphviz dot is not installed: use "+GraphDotPath, http.StatusNotImplemented)
		return
	case err != nil:
		p.log.Warn("rendering stage graph", "err", err)
		http.Error(w, "rendering the stage graph failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(svg)
}
