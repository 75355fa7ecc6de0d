// Command sandstorm-plot turns a Sandstorm profile log (written by package
// profiler) into SVG line charts, like the thesis's Figs. 30 and 42: one
// chart per metric with a line per stage (queue length, threads,
// throughput, rejections by default), and one chart per stage with its
// queue length and thread count over time.
//
// Usage:
//
//	sandstorm-plot [-o dir] [-stages A,B] [-metrics queue.length,pool.size] sandstorm-profile.log
//
// With -bench it charts a load sweep instead, the JSON lines that
// cmd/loadgen run -json appends (bench/run.sh JSON=file): throughput,
// requests/s and Jain fairness against the number of clients, a line per
// server (the thesis's Fig. 37), and with -cdf 64,1024 the cumulative
// response-time distribution at those client counts (Figs. 38 and 40):
//
//	sandstorm-plot -bench -cdf 64,1024 -prefix haboob- -o docs/figures sweep.jsonl
//
// It needs no external tool: the SVG is written directly. Lines break
// where a stage is absent from the log or the sampling stopped for more
// than ten intervals; thread counts are drawn as steps.
package main
