// Package enqueuepred holds admission-control policies for SEDA stages:
// sink.Predicate implementations that decide, on every enqueue attempt,
// whether a stage accepts an event.
//
// # Start here
//
// Most stages need one of three, set in YAML (`predicate:`) or with
// sink.Sink.SetPredicate:
//
//   - a fixed queue bound: no predicate at all, just `queue: {threshold: N}`
//     (or NewThreshold for a bound below the queue's capacity);
//   - a fixed rate: `{type: rate, rate: 5000, depth: 100}` (NewRate), when
//     you know what the stage or what it calls can sustain;
//   - a latency target: `{type: rt, target: 200ms}` (NewResponseTime), the
//     thesis's controller, when you know how long a request may take and
//     not what rate that is; `{type: counter, limit: 64}` (NewCounter)
//     bounds the events in service instead.
//
// The others are for particular needs: classes of service (Multiclass,
// Priority), sessions (Session), queue-delay shedding (Sojourn, RED),
// load measured elsewhere (Modified with samplers), cost (Cost), limits
// shared between stages (GroupRate), composition (All, Any).
//
// # Every policy
//
// Static policies:
//
//   - Threshold: reject while the guarded queue holds limit events or more.
//   - Rate: token bucket of any rate (no 1 ms tick cap) and burst depth,
//     lock-free, about one compare-and-swap per decision.
//   - RED: random early detection, dropping with a probability that grows
//     with the averaged queue length.
//   - Counter (JOBS §7.2.1): at most limit events in service at once; the
//     runtime returns the credit through sink.Done, also on failure.
//   - Cost (Whirlwind §III.D): the estimated cost of the events admitted
//     and not yet handled stays within a limit, so expensive requests are
//     refused first and cheap variants still get in (Costed, CostOf).
//   - GroupRate (JOBS §7.2.3): one token bucket shared by every stage whose
//     predicate names the same group (see Shared).
//
// Adaptive policies:
//
//   - ResponseTime: the 90th-percentile response-time controller of the SEDA
//     thesis §7.2.1. ModeThesis is the paper's additive-increase /
//     multiplicative-decrease token bucket with its Fig. 50 parameters;
//     ModeFast (the default) limits the queue wait of new arrivals to
//     target − p90(service) at the stage's measured capacity, with a
//     feedback gain that puts the measured p90 at the target: it holds in
//     any stage shape (one worker or many) and refuses nothing while the
//     queue is empty. P90, Enable and Disable are the service-degradation
//     API of §7.2.2.
//   - Limit: an adaptive concurrency limit (Vegas or Gradient, as in
//     Netflix's concurrency-limits) on the events queued or in service,
//     moved by response versus service time; it needs no target.
//   - Pacer (JOBS): a queueing regulator that delays dispatch to a rate
//     instead of refusing (stage `queue: {dispatch}`).
//   - Saturated (§8.2.1): admission control only once the thread pool
//     cannot grow; Accounting (Whirlwind): per-principal usage in metrics;
//     NewAdaptiveCost: a cost limit moved by response-time feedback.
//   - Multiclass (§7.2.3): one controller and bucket per class; when a class
//     misses its target, lower classes are cut first.
//   - Sojourn: CoDel-style; rejects while the minimum queueing delay over the
//     last interval stayed above a target (the queue has not drained).
//   - Modified (JOBS §7.2.4): samplers (CPU, heap, goroutines, another
//     stage's queue length or response time, polled; arrivals, service and
//     wait times fed by the guarded stage's own events: EventFed) turn
//     readings into an overload
//     degree through value or duration templates, and the degree scales down
//     a regulator's limit (Rate, Counter, Threshold, GroupRate).
//
// Principals and composition:
//
//   - Events may carry a Principal (Whirlwind §III.C) through Principaled, or
//     just a class through Classed. Session admits or rejects all requests of a
//     session together; Priority gives principals of higher priority a larger
//     share of the queue.
//   - Events reporting NonRejectable() == true (JOBS §6.4, e.g. a session
//     teardown) bypass admission in every predicate here; they are still
//     charged to counters and buckets so that accounting stays exact.
//   - All and Any compose predicates; Session, Saturated, Accounting and
//     Modified wrap one. They implement sink.Composite and forward no
//     runtime hook by hand: the sink binds, completes, cancels and asks
//     to shed every predicate of the tree (sink.Admission), so a counter
//     or a CoDel inside a composite works as it does alone. Within the
//     package, composites charge their children for events they admit
//     without asking them (non-rejectable events, Any's other children).
//
// Every predicate counts its rejections (and, except the token bucket whose
// hot path is kept to one shared word, its admissions) and implements
// Inspector so that a profiler can read its state (rate, tokens, p90,
// accepted, rejected, ...).
// Parameters can be changed while traffic flows (SetRate, SetLimit,
// SetTarget, ...); replacing a stage's predicate is sink.Sink.SetPredicate.
//
// Time always comes from a Now function in the policy's config (nil means
// the real clock; buckets then read only the monotonic clock), so
// controllers are tested on a fake clock. No policy here starts
// a goroutine: time-driven updates happen lazily inside Accept and Done.
//
// FromYAML builds any policy from a stage's `predicate:` configuration block.
package enqueuepred
