// Package profiler observes a running stage graph, like Sandstorm's
// profiler (thesis §5.3.5): it samples every stage of a stage.Manager at a
// fixed interval and
//
// Start with New(manager, Config{HTTP: "127.0.0.1:9090"}, logger) and
// Start: the dashboard is then at /debug/sandstorm/ and Prometheus metrics
// at /metrics (docs/grafana-sandstorm.json is a Grafana dashboard for
// them). In YAML this is `global.profiler`.
//
//   - appends one line per sample to a gnuplot-ready profile log (the Unix
//     time, the Go runtime's memory and goroutines, then a name/value pair
//     for every queue length, pool size, batching factor, counter, rate,
//     controller variable, predicate value and handler-registered value;
//     see LogWriter for the format and ReadLog to read it back);
//   - writes the stage graph traced from real enqueues (stage.Manager.Edges)
//     as Graphviz .dot, edges labelled with event counts and stages with
//     their queue lengths, producers outside any stage drawn as one
//     "outside" node; at Shutdown it is rendered to SVG when Graphviz's dot
//     is installed. On a node of a cluster (package remote) every stage is
//     labelled with the nodes hosting it and the stages hosted only
//     elsewhere are dashed, with their remote sinks' numbers (Sample.Remote);
//     the dashboard's graph does the same;
//   - serves, when given an address, a live dashboard at /debug/sandstorm/
//     (one self-contained page embedded in the binary: the stage graph and
//     plots of queue lengths, pool sizes, throughput, rejections and p90
//     times per stage; a stage that completed nothing in a sample's window
//     has "no samples" there, null in the JSON, not its last busy p90),
//     the samples as JSON at /debug/sandstorm/metrics.json,
//     the Prometheus text exposition at /metrics and net/http/pprof under
//     /debug/pprof/;
//   - is the admin port (DESIGN §12): /healthz answers 200 while the
//     process runs; /readyz 200 while serving and 503 once draining (Drain,
//     or the manager's Shutdown began) or after a root supervisor gave up
//     (stage.Manager.Ready); /config the effective configuration as YAML
//     with secrets redacted (EffectiveConfig, IsSecretKey). A library
//     application that sets global.profiler.http in its file and builds its
//     manager with stage.Load or stage.Parse gets all of them.
//
// The values come from the manager's own go-metrics registry
// (stage.Manager.Metrics), where package stage registers each stage's
// metrics under "<stage>.<name>" (counters, queue length, pool size,
// batching factor, the thread-pool and batching controllers' variables)
// and handlers add theirs with stage.Context.Profile (Sandstorm's
// ProfilableIF), plus rates the profiler derives between samples.
// Admission predicates that report their state through an
// Inspect(func(name string, value float64)) method (package enqueuepred:
// the response-time controllers' p90, admitted rate and target, per class
// for a multiclass one) are put into that registry too: from its first
// sample until Shutdown the profiler keeps a functional gauge
// "<stage>.predicate.<name>" for every name the stage's current predicate
// reports, so the registry, the profile log, metrics.json and /metrics
// show the same values. StageSample documents the names.
//
// The Prometheus exposition (/metrics) follows the Prometheus naming
// conventions rather than the sample's names: snake_case under
// sandstorm_, counters with a _total suffix and a unit
// (sandstorm_stage_enqueued_events_total), seconds for durations,
// histograms for the latency and batch-size distributions
// (sandstorm_stage_service_seconds, sandstorm_stage_queue_wait_seconds,
// sandstorm_stage_batch_size_events, from stage.Stage.Latency), and
// labels for what varies: stage, class (predicate.class0.p90 is
// sandstorm_stage_rt_p90_seconds{stage="...",class="0"}), reason
// (sandstorm_stage_rejected_events_total{reason="queue_full|predicate|closed"}),
// code (sandstorm_http_responses_total{code="2xx"}), socket and server
// for the I/O layers. Derived rates and reservoir quantiles are left out:
// use rate() and histogram_quantile(). docs/grafana-sandstorm.json is a
// dashboard for them.
//
// Rejections and drops: enqueued counts the events a stage's queue
// accepted; rejected.full, rejected.predicate and rejected.closed count
// refusals by reason (queue at its threshold, admission predicate, queue
// closed). dropped counts the refusals of EnqueueLossy and is a subset of
// those rejections, not an addition to them: an event offered lossily
// and refused by the predicate is counted once in rejected.predicate and
// once in dropped. The events a stage lost are rejected.full +
// rejected.predicate + rejected.closed; dropped says how many of them the
// producer had offered as droppable.
//
// Configuration is the `global.profiler` block of a stage configuration
// (see Config and ConfigFrom):
//
//	global:
//	  profiler: {enabled: true, interval: 1s, file: sandstorm-profile.log, graph: sandstorm-graph.dot, http: "127.0.0.1:9090"}
//
// The command cmd/sandstorm-plot turns a profile log into SVG plots.
package profiler
