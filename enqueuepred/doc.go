// Package enqueuepred holds admission-control policies for SEDA stages:
// sink.Predicate implementations that decide, on every enqueue attempt,
// whether a stage accepts an event.
//
// # Start here
//
// Most stages set their policy in YAML, a stage's `predicate:` block
// (FromSpec builds it; Types lists the types):
//
//	predicate: {type: threshold, limit: 1000}         # a queue bound below the queue's capacity
//	predicate: {type: rate, rate: 5000, depth: 100}   # a fixed rate, when you know what the stage sustains
//	predicate: {type: rt, target: 500ms}              # a 90th-percentile response-time target (thesis ch. 7)
//	predicate: {type: multiclass, targets: {0: 2s, 1: 500ms}}  # one target per class of service
//	predicate: {type: counter, limit: 64}             # at most 64 events in service
//
// A fixed queue bound needs no predicate at all: `queue: {threshold: N}`.
// The other types (vegas, gradient, red, codel, cost, group, session,
// priority, saturated, account, all, any; modifiers on rate, counter and
// threshold) are listed with their keys at FromSpec.
//
// In Go, sink.Sink.SetPredicate installs a predicate made by a
// constructor. The constructors return sink.Predicate; the concrete types
// stay inside the package, except where a caller needs their methods:
//
//   - NewThreshold, NewRate (*Rate: SetRate, Scale, Tokens), NewCounter;
//   - NewResponseTime (*ResponseTime: P90, Target, SetTarget, Enable,
//     Disable), which Degrader drives for service degradation (§7.2.2;
//     ResponseTimeOf finds a stage's controller), and NewMulticlass;
//   - NewLimit (*Limit: Limit, InFlight), an adaptive concurrency limit
//     (vegas or gradient, as in Netflix's concurrency-limits) that needs
//     no target;
//   - NewPacer (*Pacer), a regulator that delays dispatch to a rate
//     instead of refusing (stage `queue: {dispatch}`).
//
// The concrete types keep their setters (SetLimit, SetWindow, ...) for
// callers that assert a small interface, such as
// p.(interface{ SetLimit(int) }); replacing a stage's predicate is
// sink.Sink.SetPredicate.
//
// # Every policy
//
// Static: threshold (queue length), rate (token bucket of any rate, no
// 1 ms tick cap, lock-free), counter (JOBS §7.2.1: events in service; the
// runtime returns the credit through sink.Done, also on failure), cost
// (Whirlwind §III.D: outstanding estimated cost, Costed; expensive events
// are refused first; CostConfig.Target makes the limit adaptive), red
// (random early detection), priority (a larger queue share for
// principals of higher priority), group (JOBS §7.2.3: one token bucket
// shared by every stage naming the group, through Shared).
//
// Adaptive: rt (ResponseTime, thesis §7.2.1: RTConfig.Mode "fast", the
// default, limits the queue wait of new arrivals to target −
// p90(service) at the stage's measured capacity and holds in any stage
// shape; "thesis" is the paper's AIMD token bucket with its Fig. 50
// parameters), multiclass (§7.2.3: a controller per class; when a class
// misses its target, lower classes are cut first), vegas and gradient
// (Limit), codel/sojourn (rejects while the minimum queueing delay over
// an interval stayed above a target), saturated (§8.2.1: admission
// control only once the stage's thread pool cannot grow).
//
// Load measured elsewhere (JOBS §7.2.4): NewModified scales a
// regulator's limit (rate, counter, threshold, group) down by the
// overload degree its Modifiers read through Samplers (NewSampler: CPU,
// heap, goroutines, another stage's queue or response time, the guarded
// stage's arrivals, service and wait times) and templates of Steps.
//
// Principals and composition:
//
//   - Events may carry a Principal (Whirlwind §III.C) through Principaled,
//     or just a class through Classed (ClassOf, PrincipalOf, PriorityOf).
//     session admits or rejects all requests of a session together (a
//     SessionTable shared by several stages makes it consistent across
//     them); account counts usage per principal.
//   - Events reporting NonRejectable() == true (sink.NonRejectable; JOBS
//     §6.4, e.g. a session teardown) bypass admission in every predicate
//     here; they are still charged to counters and buckets so that
//     accounting stays exact.
//   - NewAll and NewAny compose predicates; session, saturated, account
//     and the modified regulators wrap one. They implement sink.Composite
//     and forward no runtime hook by hand: the sink binds, completes,
//     cancels and asks to shed every predicate of the tree
//     (sink.Admission), so a counter or a codel inside a composite works
//     as it does alone.
//
// Every predicate counts its rejections (and, except the token bucket
// whose hot path is kept to one shared word, its admissions) and
// implements Inspector so that a profiler can read its state (rate,
// tokens, p90, accepted, rejected, ...).
//
// # What it does not do
//
// It does not queue, schedule or run anything: the sink holds the events
// and the stage runtime reports completions (sink.Done) and cancellations
// (sink.Cancel) back. No policy starts a goroutine: time-driven updates
// happen lazily inside Accept and Done (a modified regulator's samplers
// are run in the background by the stage runtime, never by a decision).
// Time always comes from a Now function in the policy's config (nil means
// the real clock; buckets then read only the monotonic clock), so
// controllers are tested on a fake clock. It knows nothing of HTTP or
// connections: classes, principals and costs come from the events' own
// methods. Constructors validate their config and return errors wrapping
// ErrBadConfig; FromSpec's errors name the YAML line and key.
package enqueuepred
