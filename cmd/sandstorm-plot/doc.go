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
// It needs no external tool: the SVG is written directly. Lines break
// where a stage is absent from the log or the sampling stopped for more
// than ten intervals; thread counts are drawn as steps.
package main
