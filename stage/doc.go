// Package stage is the SEDA runtime: stages, the manager that owns the stage
// graph, handler registries, YAML configuration, timers and signals.
//
// Start with a Handler (or TypedFunc, for a handler that wants []T
// rather than []sink.Event), a Registry to name it in YAML, Load to build
// the Manager from a file, Start, and Shutdown. From Go, NewManager and
// CreateStage do the same without a file. Enqueue on a stage's Sink and
// react to sink.ErrRejected; for request-reply use Call, which waits for a
// handler's Request.Reply with the caller's context (package nethttp
// serves it over net/http).
//
// A stage is a Handler, an admission-controlled queue (package sink) and the
// goroutines that serve it (package threadpool). Handlers never dequeue: the
// runtime hands them batches, measures them, feeds completions back to the
// stage's predicate and contains their failures (an error or a panic is
// recovered, counted, logged and reported, and the stage goes on).
//
// A graph is wired in YAML (see Load and docs/yaml.md) with handlers
// named in a Registry, or built from Go with Manager.CreateStage. Inside a
// handler, Context.Sink gives the sinks of other stages; enqueues through
// them are traced as edges of the stage graph (Manager.Edges). A sink that
// arrives in an event (where to reply) is passed through Context.Traced, so
// that the reply is traced from the stage that sends it.
//
// Stage knows none of the packages built on it. The blocks of a
// configuration they own — sections of `global:` such as aio's, the
// profiler's and the cluster's, and keys of a stage's block such as
// remote's — are registered from their init functions (RegisterSection,
// RegisterStageSection, as database/sql drivers register), so linking a
// package in is all a program does; the loader decodes each with its
// Section, locates its errors (file, line, key), and gives the values back
// (GlobalConfig.Section, StageConfig.Section). A key no linked-in package
// registered is an unknown key. Blocks are read through Decoder, which
// also decodes a handler's args (Context.DecodeArgs) and predicate blocks;
// wiring (which manager, which registry) is passed in code.
//
// Load and Parse take NewManager's Options (logger, failure hook, clock);
// a manager they make also runs what the file's global block configures:
// the services of linked-in packages (the profiler and its dashboard, see
// RegisterService), and a Shutdown bounded by global.shutdown (Run starts,
// waits for its context and shuts down within that bound).
//
// Lifecycle: NewManager or Load, CreateStage, Start, then Shutdown, which
// drains every queued event before it closes the queues, like
// http.Server.Shutdown. Done and Err tell a command when the manager has
// stopped, whether by Shutdown or because a root supervisor with
// `onGiveUp: stop` gave up. If the
// context given to Start ends instead, every queue closes at once and the
// events it held are discarded, counted (Stats.Removed) and logged.
// DestroyStage and DestroyStageContext (a bounded wait) remove one stage at
// run time; events they cannot have handled are reported
// (ErrEventsDiscarded), never dropped silently.
//
// Reload applies a new configuration to a running manager (the thesis's
// dynamic stage creation put to work; ReloadFile, ReloadOnSignal for
// SIGHUP): changed predicates, queue thresholds, thread-pool and batching
// bounds apply in place while traffic flows, added stages are created and
// started, removed ones stop intake and drain; a file with errors is
// refused whole and the running configuration stays. What a running
// stage cannot take in place (its handler's args, a section of global:)
// is named in the ReloadSummary, never ignored silently.
//
// Whirlwind's mechanisms (Donald & Ghosh §III) are built in:
//
//   - Fault containment and monitors: a failure (handler error or panic) is
//     recorded with its events, counted, logged, passed to
//     Options.OnFailure and delivered as a StageFailed event to every sink
//     that monitors the stage (Manager.Monitor); a monitor's last event is
//     StageTerminated. Other events and stages go on. Failures are per
//     event when the handler says which events failed: it returns an
//     EventError (FailEvent; several joined with errors.Join) naming each
//     failed event by its index in the batch, having dealt with the
//     others; each named event is then a failure of its own. Otherwise —
//     a panic, any other error — the batch fails as a whole
//     (Failure.Whole): the failure holds the whole batch and which of its
//     events were handled is unknown (after a panic, those from the
//     panicking event on were not). Use EventError, or batches of one
//     (BatchingConfig.Max 1), where each event's fate matters. Monitor
//     events are non-rejectable (sink.NonRejectable): a monitoring stage
//     gets them past a full queue and a load-shedding predicate.
//   - Supervision: a stage's `supervisor:` block (StageConfig.Supervisor,
//     CreateSupervised) or a group in the top-level `supervisors:` block
//     (Manager.Supervise) restarts crashed handlers from their factories
//     with the one-for-one, one-for-all or rest-for-one strategy. Only a
//     panic is a crash unless `restartOn: error`: returned errors and
//     FailEvent are failures of their events. A crashed stage is paused
//     until its supervisor acts, so the failed handler gets no new batch,
//     and its queue is kept for the fresh handler. Only crash loops back
//     off (`backoff`, `maxBackoff`, with jitter): a restarted handler
//     that fails before it has handled anything; a handler that has
//     handled events and then meets a rare poison event is restarted at
//     once. `backoff: off` (or an explicit 0; NoBackoff in Go) turns
//     backoff off. Beyond the restart intensity (MaxRestarts
//     in Period) a supervisor gives up and its parent restarts the whole
//     subtree; a root that gives up fails its own stages (their queues
//     close: enqueues get sink.ErrClosed), or with `onGiveUp: stop` stops
//     the manager cleanly (Done, Err wrapping ErrGaveUp).
//   - Sequential processes: OrderingConfig (`ordering: {key: event |
//     principal}` or `keyed: true`) handles the events of one key one at a
//     time in FIFO order while different keys run in parallel; with
//     `linked: true` the queued events of a principal fail together with
//     one that failed (ErrLinked): the principals of the events an
//     EventError names, or of every event of a batch that failed whole.
//     Only the events still queued on that stage are cancelled, not those
//     already running, queued on other stages or enqueued later.
//   - Principals (enqueuepred.Principal) carried by events drive the
//     schedulers and the admission predicates alike, so a session is
//     treated the same in every stage.
//   - Schedulers: SchedulerConfig (`scheduler: fifo | lifo | priority |
//     shortest` or `{type: stride, tickets: {0: 1, 1: 3}}`). FIFO, the
//     default, keeps the queue's fast path.
package stage
