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
			if counterNames[v.Name] {
				emit("sandstorm_stage_"+promName(v.Name)+"_total", "Stage counter "+v.Name+".", prometheus.CounterValue, v.Value, []string{"stage"}, st.Name)
			} else {
				emit("sandstorm_stage_"+promName(v.Name), "Stage value "+v.Name+".", prometheus.GaugeValue, v.Value, []string{"stage"}, st.Name)
			}
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
