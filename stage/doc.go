// Package stage is the SEDA runtime: stages, the manager that owns the stage
// graph, handler registries, YAML configuration, timers and signals.
//
// A stage is a Handler, an admission-controlled queue (package sink) and the
// goroutines that serve it (package threadpool). Handlers never dequeue: the
// runtime hands them batches, measures them, feeds completions back to the
// stage's predicate and contains their failures (an error or a panic is
// recovered, counted, logged and reported, and the stage goes on).
//
// A graph is wired in YAML (see Load and the README's schema) with handlers
// named in a Registry, or built from Go with Manager.CreateStage. Inside a
// handler, Context.Sink gives the sinks of other stages; enqueues through
// them are traced as edges of the stage graph (Manager.Edges).
//
// Lifecycle: NewManager or Load, CreateStage, Start, then Shutdown, which
// drains every queued event before it closes the queues, like
// http.Server.Shutdown.
package stage
