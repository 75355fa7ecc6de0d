// Package batching holds the SEDA batching controller (thesis §5.4.2,
// Fig. 32).
//
// You rarely use this package directly: a stage's `batching:` block
// (stage.BatchingConfig) sets its bounds and turns the controller on.
//
// The runtime hands a stage's handler batches of at most BatchSize events.
// Large batches amortize expensive operations and improve locality; small
// ones spread events over more workers and cut head-of-line blocking. The
// [Controller] searches for the smallest batching factor that keeps the
// stage at its peak throughput: starting at the maximum it shrinks the
// factor while throughput stays close to the best seen, grows it again
// until throughput recovers, and starts over from the maximum when the
// throughput changes so much that the workload must have changed.
//
// The controller is a clock-free state machine: the stage feeds it its
// cumulative completion count once per interval with
// [Controller.Observe], and workers read the current factor with
// [Controller.BatchSize], an atomic load safe on the hot path.
// [Controller.SetConfig] changes its bounds and settings while it runs (a
// configuration reload). The package imports nothing from the rest of the
// project.
package batching
