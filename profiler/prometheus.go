package profiler

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// PrometheusPath is where Handler serves the Prometheus text exposition.
const PrometheusPath = "/metrics"

// counterNames are the stage values that only ever grow: exported as
// Prometheus counters (with a _total suffix), every other value as a gauge.
var counterNames = map[string]bool{
	"enqueued": true, "handled": true, "batches": true, "failures": true, "dropped": true,
	"rejected.full": true, "rejected.predicate": true, "rejected.closed": true,
}

// stageHelp describes the stage values whose meaning the name alone does
// not tell; the others get a generic help text.
var stageHelp = map[string]string{
	"enqueued":           "Events the stage's queue accepted.",
	"handled":            "Events the stage's handler completed.",
	"batches":            "Batches handed to the stage's handler.",
	"failures":           "Handler invocations that returned an error or panicked.",
	"rejected.full":      "Events refused because the stage's queue was at its threshold.",
	"rejected.predicate": "Events refused by the stage's admission predicate (lossy drops included: see dropped).",
	"rejected.closed":    "Events refused because the stage's queue was closed.",
	"dropped": "Events offered with EnqueueLossy and refused. A subset of the rejections, not an addition: " +
		"each drop is also counted in rejected_full, rejected_predicate or rejected_closed.",
	"queue.length":         "Events waiting in the stage's queue.",
	"pool.size":            "Threads (worker goroutines) of the stage's pool.",
	"pool.throughput":      "Thread-pool controller: smoothed throughput, events/s.",
	"pool.best.size":       "Thread-pool controller: the best pool size found by thrashing detection.",
	"pool.best.throughput": "Thread-pool controller: throughput at the best pool size, events/s.",
	"batching.factor":      "Batching factor: the most events per handler invocation.",
	"batching.best":        "Batching controller: best recent throughput, events/s.",
	"batching.throughput":  "Batching controller: last measured throughput, events/s.",
	"rate.enqueued":        "Events enqueued per second over the last sampling interval.",
	"rate.handled":         "Events handled per second over the last sampling interval.",
	"rate.rejected":        "Events rejected (queue full or predicate) per second over the last sampling interval.",
	"predicate.p90":        "Response-time controller: measured 90th-percentile response time, seconds (per class for a multiclass one).",
	"predicate.rate":       "Response-time controller: admitted rate (token-bucket rate), events/s (per class for a multiclass one).",
	"predicate.target":     "Response-time controller: 90th-percentile response-time target, seconds.",
}

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

// promName turns a sample name ("queue.wait.ns.p90") into a Prometheus
// metric name fragment ("queue_wait_ns_p90").
func promName(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_', r >= '0' && r <= '9' && i > 0:
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// collector exports the profiler's latest sample through the Prometheus
// client library, which writes the exposition format. Stages come and go,
// so it is an unchecked collector: it describes nothing up front.
type collector struct{ p *Profiler }

func (c collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.current()
	emit := func(name, help string, kind prometheus.ValueType, v float64, labels []string, values ...string) {
		desc := prometheus.NewDesc(name, help, labels, nil)
		if m, err := prometheus.NewConstMetric(desc, kind, v, values...); err == nil {
			ch <- m
		}
	}
	for _, st := range s.Stages {
		for _, v := range st.Values {
			name, class, classed := splitClass(v.Name)
			labels, values := []string{"stage"}, []string{st.Name}
			if classed {
				labels, values = append(labels, "class"), append(values, class)
			}
			help := stageHelp[name]
			kind, metric := prometheus.GaugeValue, "sandstorm_stage_"+promName(name)
			if counterNames[name] {
				kind, metric = prometheus.CounterValue, metric+"_total"
			}
			if help == "" {
				help = "Stage value " + name + "."
				if kind == prometheus.CounterValue {
					help = "Stage counter " + name + "."
				}
			}
			emit(metric, help, kind, v.Value, labels, values...)
		}
	}
	for _, e := range s.Edges {
		from := e.From
		if from == "" {
			from = OutsideNode
		}
		emit("sandstorm_edge_events_total", "Events enqueued along an edge of the stage graph.", prometheus.CounterValue, float64(e.Count), []string{"from", "to"}, from, e.To)
	}
	for _, v := range s.Other {
		emit("sandstorm_"+promName(v.Name), "Manager value "+v.Name+".", prometheus.GaugeValue, v.Value, nil)
	}
}

// prometheusHandler serves the stage metrics plus the Go runtime's own.
func (p *Profiler) prometheusHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{p}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
