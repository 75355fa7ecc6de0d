// Package profiler observes a running stage graph, like Sandstorm's
// profiler (thesis §5.3.5): it samples every stage of a stage.Manager at a
// fixed interval and
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
//     is installed;
//   - serves, when given an address, a live dashboard at /debug/sandstorm/
//     (one self-contained page embedded in the binary: the stage graph and
//     plots of queue lengths, pool sizes, throughput, rejections and p90
//     times per stage), the samples as JSON at /debug/sandstorm/metrics.json
//     and net/http/pprof under /debug/pprof/.
//
// The values come from the manager's own go-metrics registry, where package
// stage registers each stage's metrics under "<stage>.<name>" and handlers
// add theirs with stage.Context.Profile (Sandstorm's ProfilableIF), plus
// the predicates that report their state through an
// Inspect(func(name string, value float64)) method (package enqueuepred),
// plus rates the profiler derives between samples. Sample documents the
// names.
//
// Configuration is the `global.profiler` block of a stage configuration
// (see Config and ConfigFrom):
//
//	global:
//	  profiler: {enabled: true, interval: 1s, file: sandstorm-profile.log, graph: sandstorm-graph.dot, http: "127.0.0.1:9090"}
//
// The command cmd/sandstorm-plot turns a profile log into SVG plots.
package profiler
