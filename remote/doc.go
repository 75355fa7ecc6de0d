// Package remote runs one stage graph across processes and machines, on
// NATS: the Replicate pattern of the SEDA thesis (ch. 3; ch. 8, "event
// queues as network connections").
//
// Start with NewManager: given the whole graph's configuration with a
// `global.cluster:` block, it joins the cluster as this process's node and
// builds the node's stage.Manager:
//
//	m, node, err := remote.NewManager(cfg, reg, stage.Options{Logger: log}, remote.Options{}, nil)
//	...
//	m.Start(ctx)
//	...
//	node.Shutdown(ctx) // stop taking events from other nodes
//	m.Shutdown(ctx)
//	node.Close()       // the NATS connection and the embedded server
//
// Without a cluster block NewManager is stage.NewFromConfig, returns a nil
// *Node (whose methods do nothing) and starts no NATS at all.
//
// Each process loads the same file with its own node name and creates the
// stages whose `nodes:` list names it (no list: every node). Every other
// stage's sink is a remote sink that honours the sink.Sink contract:
//
//   - mode request (default): an enqueue is a core NATS request to the
//     least loaded replica (each replica publishes its queue length every
//     heartbeat; the sender adds its own requests in flight), whose own
//     admission control decides; the verdict comes back at once: nil, or
//     a *RejectError (wrapping sink.ErrRejected) naming node, stage and
//     predicate, or a *ClosedError (sink.ErrClosed). No replica up is a
//     rejection at once (NATS "no responders"), not a timeout. A request
//     that gets no answer is sent again to the same replica with the same
//     idempotency key, which it decides once; after remote.timeout the
//     enqueue is rejected. EnqueueMany is one message, admitted all or
//     nothing by one replica; concurrent Enqueues and EnqueueManys share
//     a message, each decided on its own, one message in flight at a
//     time unless a message is full (256 callers, or 256 KiB of events),
//     when up to four go side by side to each destination and may be
//     admitted in any order (each caller's own events keep theirs: it
//     waits for its verdict). Prepare holds room on one
//     replica until the Txn's Commit or Abort (or, if neither comes, the
//     duplicates window); the outcome goes to that replica alone and
//     waits for it like a reply (below), decided there once per
//     transaction; one refused or not delivered cancels the events'
//     ticket, is counted (SinkStats.LostOutcomes), logged, and is the
//     Txn's Err; a Commit that may have been kept (ErrOutcomeUnknown) is
//     counted apart (SinkStats.UnknownOutcomes).
//   - mode durable: an enqueue is a JetStream publish to the stage's
//     work-queue stream, whose size limit is the stage's queue threshold
//     (a full stream rejects the enqueue). Replicas pull what their queue
//     has room for, acknowledge an event once its handler succeeded, nak
//     it with a delay when their predicate refuses it or the handler
//     fails, and a replica that dies leaves its unacknowledged events to
//     be redelivered to another after remote.timeout. A slow replica
//     keeps what it queued: while its stage makes progress, it renews
//     the acknowledgement wait of its deliveries with events queued (and
//     of those whose last event entered a handler less than
//     remote.timeout ago), counted as remote.<stage>.inProgress, up to
//     ten waits (or queue.max_time plus one) after which a delivery
//     still queued is nak'd (remote.<stage>.givenBack); a stopped or
//     stuck one renews nothing.
//     An event delivered
//     remote.maxDeliver times (default 5) without an acknowledgement goes
//     to the stage's dead-letter stream (DeadLetterStream) with its last
//     error in the HeaderError header, counted (remote.<stage>.deadletters,
//     SinkStats.DeadLettered) and logged at WARN, rate-limited: on its
//     last delivery the replica stores it there when the handler or the
//     predicate fails it; a last delivery with no answer at all (the
//     replica died) comes back as JetStream's max-deliveries advisory,
//     which one replica turns into the dead letter.
//
// Replica health (request mode): every sender sweeps the replicas of its
// stage each heartbeat and takes out of rotation one silent for three
// heartbeats (at least a second) or gone (no responders): the requests
// waiting for its verdict are rejected at once (SinkStats.Unanswered) or,
// for a stage marked `remote: {idempotent: true}`, sent once to another
// replica (SinkStats.Failovers); a heartbeat brings it back. Joins,
// leaves, silences, timeouts and "no replica" are logged at WARN, at
// most one line a second per cause and stage. Options.Watcher (a
// ReplicaWatcher) hears which replica admitted each event and which
// replica went out, so an application can answer at once what a dead
// replica took with it. SetHome routes events of a type to the replica
// on the instance they belong to (a reply to the front holding its
// connection, when several nodes host the stage).
//
// Security: `global.cluster.tokenFile` makes the embedded server require
// a token every node presents (nats-server Authorization, nats.go Token),
// and `global.cluster.tls` (ClusterTLS) makes NATS speak TLS, the server
// verifying client certificates against its CA when one is given. A node
// the server refuses fails Join at once. The token is read at Join, kept
// out of ClusterConfig, logs and errors.
//
// SetPredicate on a remote sink sets a predicate run on the sending node
// before anything is sent (the replicas' own predicates still decide),
// held in a sink.Admission like every sink's: a refusal is a
// *sink.RejectError, and every event it admits is completed once its
// fate is known: Done when a replica took it (its verdict, or the
// stream's acknowledgement; the round trip is the service time), Cancel
// when none did (refused, no replica, no verdict in time, transport
// error, transaction aborted or refused at commit). So a concurrency
// limit on a remote sink bounds the events in flight to the cluster and
// leaks nothing. Both modes pass package sinktest.
//
// Events cross nodes through Codecs keyed by Go type (Register: JSON, or
// encoding.BinaryMarshaler when the type has it; RegisterFunc for your
// own). An event of an unregistered type is refused at Enqueue with an
// error wrapping ErrNoCodec and sink.ErrRejected, never a panic. A
// sink.Sink in a top-level field of a struct event travels as a SinkRef:
// the handler on the other node enqueues on it and the events come back
// to the original sink (the request-reply path); Wire.Keep and Wire.Take
// do the same for other objects with an identity.
//
// The wire format has a version (WireVersion): a node reads its own and
// older ones, and answers a request of a newer one with an error verdict
// naming both versions (a *VersionError's text), counted
// (Node.VersionRefused) and logged; a durable message of a newer version
// is nak'd for a newer replica, and a dead letter on its last delivery.
// A reply (an event with a home, or one sent on a SinkRef) waits for its
// home, until its stage's timeout, whatever keeps it away: this node cut
// off from NATS (any other enqueue is then rejected at once), the home's
// node cut off (no responders), the home out of rotation for its
// silence; each wait is counted (SinkStats.Waits) and logged. A reply
// never goes to another replica or to the stage's queue group (another
// front could take it), and is admitted once however often it is sent
// again (its idempotency key, on a SinkRef too). A home this sender never
// heard of is taken for an instance not serving the stage (SetHome).
//
// Trace contexts cross nodes: the span context of an event that carries
// one (stage.ContextEvent) travels in the message headers as W3C
// traceparent/tracestate, and the replica sets it as the remote parent of
// the decoded event's context (stage.ContextSetter) before enqueuing it,
// so otelstage's spans on both nodes form one trace.
//
// Group rates (`{type: group}` predicates) are cluster-wide: the rate
// configured is the cluster's total, split evenly among the live nodes
// using the group (see GroupShare for the accuracy bound). Every remote
// sink publishes remote.<stage>.{sent,events,rejected,retransmits,dropped,
// rtt.p50.us,rtt.p99.us} in the manager's metrics registry (a durable
// stage's sink also redelivered, the stream's redeliveries; durable
// replicas: redelivered, naks, acks), and enqueues on remote stages are
// edges of the node's stage graph (Manager.Edges). The profiler draws
// each node's graph with the nodes hosting every stage, and the stages
// hosted elsewhere as dashed boxes carrying these numbers.
//
// What it does not do: it does not order events across replicas, it does
// not make request mode survive a replica's death (events that replica had
// admitted are lost with it; durable mode is for that), and a durable
// event whose value is not comparable (a struct holding a slice) is
// acknowledged when its replica admits it, not when it was handled.
package remote
