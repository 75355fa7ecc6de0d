package remote

import (
	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// registerSinkMetrics publishes a remote sink's counters in the manager's
// metrics registry (and so in the profiler's log, dashboard JSON and
// Prometheus export) as "remote.<stage>.<name>": sent, events, rejected,
// retransmits, dropped, waits (SinkStats.Waits), lostOutcomes
// (SinkStats.LostOutcomes), unknownOutcomes (SinkStats.UnknownOutcomes),
// rtt.p50.us, rtt.p99.us, in request mode replicas
// (in rotation), unanswered and failovers, and for a durable stage
// redelivered and deadletters (SinkStats.Redelivered, DeadLettered).
func registerSinkMetrics(m *stage.Manager, name string, s sink.Sink) {
	reg := m.Metrics()
	prefix := "remote." + name + "."
	gauge := func(n string, f func() int64) {
		_ = reg.Register(prefix+n, metrics.NewFunctionalGauge(f))
	}
	stat := func(f func(SinkStats) uint64) func() int64 {
		return func() int64 { st, _ := Stats(s); return int64(f(st)) }
	}
	gauge("sent", stat(func(st SinkStats) uint64 { return st.Sent }))
	gauge("events", stat(func(st SinkStats) uint64 { return st.Events }))
	gauge("rejected", stat(func(st SinkStats) uint64 { return st.Rejected }))
	gauge("retransmits", stat(func(st SinkStats) uint64 { return st.Retransmits }))
	gauge("dropped", stat(func(st SinkStats) uint64 { return st.Dropped }))
	gauge("waits", stat(func(st SinkStats) uint64 { return st.Waits }))
	gauge("lostOutcomes", stat(func(st SinkStats) uint64 { return st.LostOutcomes }))
	gauge("unknownOutcomes", stat(func(st SinkStats) uint64 { return st.UnknownOutcomes }))
	gauge("rtt.p50.us", func() int64 { p50, _, _ := RoundTrip(s); return p50.Microseconds() })
	gauge("rtt.p99.us", func() int64 { _, p99, _ := RoundTrip(s); return p99.Microseconds() })
	if r, ok := s.(interface{ Replicas() int }); ok {
		gauge("replicas", func() int64 { return int64(r.Replicas()) })
		gauge("unanswered", stat(func(st SinkStats) uint64 { return st.Unanswered }))
		gauge("failovers", stat(func(st SinkStats) uint64 { return st.Failovers }))
	}
	if _, durable := s.(*durableSender); durable {
		// The name the replicas use for the redeliveries they received.
		gauge("redelivered", stat(func(st SinkStats) uint64 { return st.Redelivered }))
		gauge("deadletters", stat(func(st SinkStats) uint64 { return st.DeadLettered }))
	}
}

// registerDurableMetrics publishes a durable replica's counters as
// "remote.<stage>.{redelivered,naks,acks,deadletters,versionRefused,inProgress,givenBack}"
// (deadletters: the events this replica moved to the dead-letter stream;
// versionRefused: the deliveries of a newer wire version it refused;
// inProgress: the acknowledgement waits it renewed for deliveries still
// queued while its stage made progress; givenBack: the deliveries it
// nak'd because none of their events reached a handler in time, also
// counted in naks).
func registerDurableMetrics(m *stage.Manager, d *durableReplica) {
	reg := m.Metrics()
	prefix := "remote." + d.name + "."
	_ = reg.Register(prefix+"redelivered", metrics.NewFunctionalGauge(func() int64 { return int64(d.redelivered.Load()) }))
	_ = reg.Register(prefix+"naks", metrics.NewFunctionalGauge(func() int64 { return int64(d.naked.Load()) }))
	_ = reg.Register(prefix+"acks", metrics.NewFunctionalGauge(func() int64 { return int64(d.acked.Load()) }))
	_ = reg.Register(prefix+"deadletters", metrics.NewFunctionalGauge(func() int64 { return int64(d.deadLettered.Load()) }))
	_ = reg.Register(prefix+"versionRefused", metrics.NewFunctionalGauge(func() int64 { return int64(d.versionRefused.Load()) }))
	_ = reg.Register(prefix+"inProgress", metrics.NewFunctionalGauge(func() int64 { return int64(d.inProgress.Load()) }))
	_ = reg.Register(prefix+"givenBack", metrics.NewFunctionalGauge(func() int64 { return int64(d.givenBack.Load()) }))
}

// registerReplicaMetrics publishes a request-mode replica's idempotency
// record as "remote.<stage>.dedup.keys" (the keys it remembers) and
// "remote.<stage>.dedup.early" (generations retired before their window
// because they were full: see dedupLimit), and the requests of a newer
// wire version it refused as "remote.<stage>.versionRefused".
func registerReplicaMetrics(m *stage.Manager, r *replica) {
	reg := m.Metrics()
	prefix := "remote." + r.name + ".dedup."
	_ = reg.Register(prefix+"keys", metrics.NewFunctionalGauge(func() int64 { return int64(r.seen.size()) }))
	_ = reg.Register(prefix+"early", metrics.NewFunctionalGauge(func() int64 { return int64(r.seen.early.Load()) }))
	_ = reg.Register("remote."+r.name+".versionRefused", metrics.NewFunctionalGauge(func() int64 { return int64(r.versionRefused.Load()) }))
}
