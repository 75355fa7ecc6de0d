package profiler

import (
	"net/http"
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandstorm-go/sandstorm/stage"
)

// PrometheusPath is where Handler serves the Prometheus text exposition.
const PrometheusPath = "/metrics"

// The exposition follows the Prometheus naming conventions: snake_case
// names under sandstorm_, counters ending in _total, durations in seconds
// (_seconds), latency and batch-size distributions as histograms, and
// what varies (stage, class, reason, code, socket, server) as labels, not
// in names. Rates and quantiles the profiler computes for its own log and
// dashboard are left out: Prometheus derives them (rate(),
// histogram_quantile()).

// promMetric says how one sample value is exported.
type promMetric struct {
	name   string // full metric name
	help   string
	kind   prometheus.ValueType
	label  string // an extra label (empty: none) ...
	lvalue string // ... and its value
	scale  float64
}

func counter(name, help string) promMetric {
	return promMetric{name: name, help: help, kind: prometheus.CounterValue}
}

func gauge(name, help string) promMetric {
	return promMetric{name: name, help: help, kind: prometheus.GaugeValue}
}

func (m promMetric) with(label, value string) promMetric {
	m.label, m.lvalue = label, value
	return m
}

// skip marks sample values not exported (derived rates, reservoir
// quantiles replaced by histograms).
var skip = promMetric{}

// stageMetrics maps the runtime's stage values (relative names, class
// taken out) to metrics; every one has the label stage.
var stageMetrics = map[string]promMetric{
	"enqueued": counter("sandstorm_stage_enqueued_events_total", "Events the stage's queue accepted."),
	"handled":  counter("sandstorm_stage_handled_events_total", "Events whose batch the stage's handler has finished (failed ones included)."),
	"batches":  counter("sandstorm_stage_batches_total", "Batches the runtime handed to the stage's handler."),
	"failures": counter("sandstorm_stage_failures_total", "Failures of the stage's handler: events it named as failed, batches that failed whole (error or panic), restarts whose Init failed."),
	"expired":  counter("sandstorm_stage_expired_events_total", "Events dropped unhandled because their context (a caller's deadline or cancellation) had ended while they were queued."),
	"rejected.full": counter("sandstorm_stage_rejected_events_total",
		"Events the stage refused, by reason: queue_full (at its threshold), predicate (admission control shed them), closed (stage stopping).").with("reason", "queue_full"),
	"rejected.predicate": counter("sandstorm_stage_rejected_events_total", "").with("reason", "predicate"),
	"rejected.closed":    counter("sandstorm_stage_rejected_events_total", "").with("reason", "closed"),
	"dropped": counter("sandstorm_stage_lossy_refused_events_total",
		"Events offered with EnqueueLossy and refused; a subset of sandstorm_stage_rejected_events_total, not an addition."),
	"queue.length":         gauge("sandstorm_stage_queue_length_events", "Events waiting in the stage's queue."),
	"pool.size":            gauge("sandstorm_stage_threads", "Worker goroutines serving the stage."),
	"pool.throughput":      gauge("sandstorm_stage_threadpool_controller_throughput_events_per_second", "Thread-pool controller's smoothed throughput (EWMA), events per second."),
	"pool.best.size":       gauge("sandstorm_stage_threadpool_controller_best_threads", "Thread-pool controller: the pool size with the best throughput found by thrashing detection."),
	"pool.best.throughput": gauge("sandstorm_stage_threadpool_controller_best_throughput_events_per_second", "Thread-pool controller: throughput at the best pool size, events per second."),
	"batching.factor":      gauge("sandstorm_stage_batching_factor_events", "Batching factor: the most events handed to the handler at once."),
	"batching.best":        gauge("sandstorm_stage_batching_controller_best_throughput_events_per_second", "Batching controller: best recent throughput, events per second."),
	"batching.throughput":  gauge("sandstorm_stage_batching_controller_throughput_events_per_second", "Batching controller: last measured throughput, events per second."),
	"rate.enqueued":        skip,
	"rate.handled":         skip,
	"rate.rejected":        skip,
}

// predicateMetrics maps what admission predicates report (Inspect) to
// metrics; names not here become gauges sandstorm_stage_predicate_<name>.
var predicateMetrics = map[string]promMetric{
	"p90":                gauge("sandstorm_stage_rt_p90_seconds", "Response-time controller: smoothed 90th-percentile response time of admitted events, seconds (per class for a multiclass controller)."),
	"p90_sample":         gauge("sandstorm_stage_rt_p90_sample_seconds", "Response-time controller: 90th percentile of the last window of response times, before smoothing, seconds."),
	"target":             gauge("sandstorm_stage_rt_target_seconds", "Admission controller's response-time (or sojourn-time) target, seconds."),
	"min_queued":         gauge("sandstorm_stage_codel_min_sojourn_seconds", "CoDel: least time an event spent queued in the last interval, seconds."),
	"rate":               gauge("sandstorm_stage_admission_rate_events_per_second", "Token-bucket rate of the admission predicate, events per second."),
	"tokens":             gauge("sandstorm_stage_admission_tokens", "Tokens in the admission predicate's bucket."),
	"depth":              gauge("sandstorm_stage_admission_bucket_depth", "Depth of the admission predicate's token bucket."),
	"accepted":           counter("sandstorm_stage_predicate_accepted_events_total", "Events the admission predicate accepted."),
	"rejected":           counter("sandstorm_stage_predicate_rejected_events_total", "Events the admission predicate rejected."),
	"sessions_admitted":  counter("sandstorm_stage_predicate_admitted_sessions_total", "Sessions (principals) the session-consistent predicate admitted."),
	"sessions_rejected":  counter("sandstorm_stage_predicate_rejected_sessions_total", "Sessions (principals) the session-consistent predicate refused."),
	"overloaded_windows": counter("sandstorm_stage_codel_overloaded_intervals_total", "CoDel intervals in which the stage was found overloaded."),
	"in_system":          gauge("sandstorm_stage_rt_in_system_events", "Response-time controller: admitted events not yet completed."),
	"throughput":         gauge("sandstorm_stage_rt_throughput_events_per_second", "Response-time controller: estimated completion rate, events per second."),
	"enabled":            gauge("sandstorm_stage_rt_enabled", "1 when the response-time controller is enforcing its rate, 0 while it only measures."),
	"limit":              gauge("sandstorm_stage_predicate_limit", "Current limit of the admission predicate (events queued or in flight)."),
	"inflight":           gauge("sandstorm_stage_predicate_in_flight_events", "Events admitted and not yet completed (counter predicate)."),
}

// handlerCounters are handler values (stage.Context.Profile) known to only
// grow; they get a _total name. Other handler values are gauges.
var handlerCounters = map[string]string{
	"cache.hits":      "Page-cache lookups that found the page.",
	"cache.misses":    "Page-cache lookups that did not find the page.",
	"cache.evictions": "Pages evicted from the page cache.",
	"requests":        "Requests the stage's handler has served.",
	"requests.inline": "Requests answered where they were parsed, bypassing the stages (Haboob's combine: page-cache hits).",
	"errors":          "Requests the stage's handler answered with an error.",
}

// handlerGauges describe handler values (stage.Context.Profile) of the
// bundled stages that are gauges.
var handlerGauges = map[string]string{
	"cache.bytes": "Bytes of pages held in the page cache.",
	"cache.pages": "Pages held in the page cache.",
	"quality":     "Degradation quality of the stage's answers, 0 (most degraded) to 1 (full).",
	"files.open":  "Files the asynchronous file layer has open.",
}

// otherMetrics maps the values the I/O layers register in the manager's
// registry, "<layer>.<instance>.<name>", to metrics labelled by instance:
// layer aio → label socket, http → label server.
var otherMetrics = map[string]map[string]promMetric{
	"aio": {
		"connections.open":          gauge("sandstorm_aio_open_connections", "Connections the socket has open now."),
		"connections.accepted":      counter("sandstorm_aio_accepted_connections_total", "Connections the socket accepted."),
		"connections.connected":     counter("sandstorm_aio_connected_connections_total", "Outgoing connections the socket established."),
		"connections.connectFailed": counter("sandstorm_aio_connect_failures_total", "Outgoing connections that failed to connect."),
		"connections.closed":        counter("sandstorm_aio_closed_connections_total", "Connections closed, for any reason."),
		"connections.rejected":      counter("sandstorm_aio_rejected_connections_total", "Connections refused at accept (over the limit, or the accept stage refused them)."),
		"bytes.in":                  counter("sandstorm_aio_received_bytes_total", "Bytes read from the socket's connections."),
		"bytes.out":                 counter("sandstorm_aio_sent_bytes_total", "Bytes written to the socket's connections."),
		"packets.in":                counter("sandstorm_aio_received_packets_total", "Packets (read events) delivered to the application."),
		"clogs":                     counter("sandstorm_aio_clogs_total", "Times a connection's pending output passed its threshold (SinkClogged)."),
		"writes.refused":            counter("sandstorm_aio_refused_writes_total", "Writes refused because a connection was clogged or closed."),
		"reads.rejected":            counter("sandstorm_aio_rejected_reads_total", "Reads the application's read stage refused."),
		"reads.governed":            counter("sandstorm_aio_read_pauses_total", "Times the read-rate governor paused reading from a connection.").with("reason", "governor"),
		"reads.stopped":             counter("sandstorm_aio_read_pauses_total", "").with("reason", "stopped"),
		"reads.unpausable":          counter("sandstorm_aio_unpausable_reads_total", "Reads that should have paused but could not."),
		"closed.idle":               counter("sandstorm_aio_forced_closes_total", "Connections the socket closed itself, by reason: idle, clogged (a peer that does not read), overflow.").with("reason", "idle"),
		"closed.clogged":            counter("sandstorm_aio_forced_closes_total", "").with("reason", "clogged"),
		"closed.overflow":           counter("sandstorm_aio_forced_closes_total", "").with("reason", "overflow"),
		"events.lost":               counter("sandstorm_aio_lost_events_total", "Completion events that could not be delivered to their sink."),
	},
	"http": {
		"connections.open":     gauge("sandstorm_http_open_connections", "HTTP connections open now."),
		"connections.accepted": counter("sandstorm_http_accepted_connections_total", "HTTP connections accepted."),
		"connections.overLimit": counter("sandstorm_http_over_limit_connections_total",
			"Connections closed at once because the server had maxConnections open."),
		"requests":          counter("sandstorm_http_requests_total", "HTTP requests parsed."),
		"requests.rejected": counter("sandstorm_http_rejected_requests_total", "HTTP requests the server's stage refused (answered 503)."),
		"responses":         skip, // the sum of the per-class counts below
		"responses.1xx":     counter("sandstorm_http_responses_total", "HTTP responses sent, by status class.").with("code", "1xx"),
		"responses.2xx":     counter("sandstorm_http_responses_total", "").with("code", "2xx"),
		"responses.3xx":     counter("sandstorm_http_responses_total", "").with("code", "3xx"),
		"responses.4xx":     counter("sandstorm_http_responses_total", "").with("code", "4xx"),
		"responses.5xx":     counter("sandstorm_http_responses_total", "").with("code", "5xx"),
		"errors.parse":      counter("sandstorm_http_parse_errors_total", "Requests that could not be parsed (answered 400, 413 or 431)."),
		"timeouts.request":  counter("sandstorm_http_timeouts_total", "Connections timed out, by kind: request (headers too slow), response (the application did not answer), write (the client did not read).").with("kind", "request"),
		"timeouts.response": counter("sandstorm_http_timeouts_total", "").with("kind", "response"),
		"timeouts.write":    counter("sandstorm_http_timeouts_total", "").with("kind", "write"),
		"closed.idle":       counter("sandstorm_http_closed_connections_total", "Connections the server closed itself, by reason.").with("reason", "idle"),
		"closed.forced":     counter("sandstorm_http_closed_connections_total", "").with("reason", "forced"),
		"closed.overflow":   counter("sandstorm_http_closed_connections_total", "").with("reason", "overflow"),
		"continues":         counter("sandstorm_http_continues_total", "100 Continue interim responses sent."),
		"replies.dropped":   counter("sandstorm_http_dropped_replies_total", "Responses for connections already closed, dropped."),
	},
}

var instanceLabel = map[string]string{"aio": "socket", "http": "server", "remote": "stage"}

// splitClass takes the class out of a value name: "predicate.class0.p90"
// is ("predicate.p90", "0", true). Names without a class<N> segment are
// returned as they are.
func splitClass(name string) (rest, class string, ok bool) {
	segs := strings.Split(name, ".")
	for i, seg := range segs {
		n, found := strings.CutPrefix(seg, "class")
		if !found || n == "" || strings.Trim(n, "0123456789") != "" {
			continue
		}
		return strings.Join(append(segs[:i:i], segs[i+1:]...), "."), n, true
	}
	return name, "", false
}

// promName turns a sample name ("queue.wait.ns", "connectFailed") into a
// snake_case Prometheus name fragment ("queue_wait_ns", "connect_failed").
func promName(s string) string {
	var b strings.Builder
	prevLower := false
	for i, r := range s {
		switch {
		case r >= 'A' && r <= 'Z':
			if prevLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			prevLower = false
		case r >= 'a' && r <= 'z', r == '_', r >= '0' && r <= '9' && i > 0:
			b.WriteRune(r)
			prevLower = r != '_'
		default:
			b.WriteByte('_')
			prevLower = false
		}
	}
	return b.String()
}

// isHistogramValue reports the reservoir summaries the runtime registers
// (service.ns.p90, batch.size.max ...), replaced here by histograms.
func isHistogramValue(name string) bool {
	for _, h := range []string{"service.ns.", "queue.wait.ns.", "batch.size."} {
		if strings.HasPrefix(name, h) {
			return true
		}
	}
	return false
}

// collector exports the profiler's latest sample and the stages' latency
// histograms through the Prometheus client library. Stages come and go,
// so it is an unchecked collector: it describes nothing up front.
type collector struct{ p *Profiler }

func (c collector) Describe(chan<- *prometheus.Desc) {}

// emitter builds metrics, giving each metric name one HELP text (the first
// one set) and one set of label names.
type emitter struct {
	ch    chan<- prometheus.Metric
	descs map[string]*prometheus.Desc
	helps map[string]string
}

func (e *emitter) desc(name, help string, labels []string) *prometheus.Desc {
	key := name + "\x00" + strings.Join(labels, ",")
	if d := e.descs[key]; d != nil {
		return d
	}
	if h, ok := e.helps[name]; ok && h != "" {
		help = h
	} else {
		e.helps[name] = help
	}
	d := prometheus.NewDesc(name, help, labels, nil)
	e.descs[key] = d
	return d
}

func (e *emitter) emit(m promMetric, v float64, labels, values []string) {
	if m.label != "" {
		labels, values = append(labels, m.label), append(values, m.lvalue)
	}
	if m.scale != 0 {
		v *= m.scale
	}
	if pm, err := prometheus.NewConstMetric(e.desc(m.name, m.help, labels), m.kind, v, values...); err == nil {
		e.ch <- pm
	}
}

func (e *emitter) histogram(name, help string, h stage.Histogram, stageName string) {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Counts[i]
	}
	d := e.desc(name, help, []string{"stage"})
	if pm, err := prometheus.NewConstHistogram(d, h.Count, h.Sum, buckets, stageName); err == nil {
		e.ch <- pm
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.current()
	e := &emitter{ch: ch, descs: map[string]*prometheus.Desc{}, helps: map[string]string{}}
	// HELP texts given once per name in the tables, on the first entry.
	for _, tbl := range []map[string]promMetric{stageMetrics, predicateMetrics, otherMetrics["aio"], otherMetrics["http"]} {
		for _, m := range tbl {
			if m.help != "" {
				e.helps[m.name] = m.help
			}
		}
	}
	for _, st := range s.Stages {
		for _, v := range st.Values {
			name, class, classed := splitClass(v.Name)
			labels, values := []string{"stage"}, []string{st.Name}
			if classed {
				labels, values = append(labels, "class"), append(values, class)
			}
			if m, ok := stageValueMetric(name); ok {
				e.emit(m, v.Value, labels, values)
			}
		}
	}
	for _, st := range c.p.m.Stages() {
		l := st.Latency()
		e.histogram("sandstorm_stage_service_seconds", "Time the stage's handler took per batch, seconds (a sample of the batches: those the runtime timed).", l.Service, st.Name())
		e.histogram("sandstorm_stage_queue_wait_seconds", "Time the first event of a batch waited in the stage's queue, seconds (same sample of batches).", l.Wait, st.Name())
		e.histogram("sandstorm_stage_batch_size_events", "Events per batch handed to the stage's handler (same sample of batches).", l.Batch, st.Name())
	}
	for _, ed := range s.Edges {
		from := ed.From
		if from == "" {
			from = OutsideNode
		}
		e.emit(counter("sandstorm_edge_events_total", "Events enqueued along an edge of the traced stage graph (from "+OutsideNode+": producers outside any stage)."),
			float64(ed.Count), []string{"from", "to"}, []string{from, ed.To})
	}
	for _, v := range s.Other {
		m, labels, values := otherMetric(v.Name)
		if m.name != "" {
			e.emit(m, v.Value, labels, values)
		}
	}
}

// stageValueMetric maps a stage value's name (class taken out) to its
// metric; ok is false for values not exported.
func stageValueMetric(name string) (promMetric, bool) {
	if m, ok := stageMetrics[name]; ok {
		return m, m.name != ""
	}
	if isHistogramValue(name) {
		return skip, false
	}
	if p, ok := strings.CutPrefix(name, "predicate."); ok {
		if m, ok := predicateMetrics[p]; ok {
			return m, true
		}
		if lvl, rest, ok := strings.Cut(p, "."); ok && strings.HasPrefix(lvl, "priority") {
			// priority<N>.limit, priority<N>.rejected
			m := gauge("sandstorm_stage_priority_limit_events", "Priority predicate: queue length above which a priority level is refused.")
			if rest == "rejected" {
				m = counter("sandstorm_stage_priority_rejected_events_total", "Priority predicate: events refused, by priority level.")
			}
			return m.with("priority", strings.TrimPrefix(lvl, "priority")), true
		}
		return gauge("sandstorm_stage_predicate_"+promName(p), "Value "+p+" the stage's admission predicate reports (Inspect)."), true
	}
	if help, ok := handlerCounters[name]; ok {
		return counter("sandstorm_stage_"+promName(name)+"_total", help), true
	}
	help := handlerGauges[name]
	if help == "" {
		help = "Value " + name + " the stage's handler reports (stage.Context.Profile)."
	}
	return gauge("sandstorm_stage_"+promName(name), help), true
}

// otherMetric maps a manager value "<layer>.<instance>.<name>" to its
// metric and labels; an unknown shape becomes a gauge of its snake_case
// name.
func otherMetric(full string) (promMetric, []string, []string) {
	layer, rest, _ := strings.Cut(full, ".")
	instance, name, ok := strings.Cut(rest, ".")
	if label, known := instanceLabel[layer]; known && ok {
		labels, values := []string{label}, []string{instance}
		if m, ok := otherMetrics[layer][name]; ok {
			return m, labels, values
		}
		return gauge("sandstorm_"+layer+"_"+promName(name), "Value "+name+" of the "+layer+" layer."), labels, values
	}
	return gauge("sandstorm_"+promName(full), "Value "+full+" of the manager's metrics registry."), nil, nil
}

// prometheusHandler serves the stage metrics plus the Go runtime's own.
func (p *Profiler) prometheusHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{p}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
