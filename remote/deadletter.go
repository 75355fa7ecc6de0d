package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Headers of a dead letter: the message of a durable stage's stream that
// was delivered remote.maxDeliver times without an acknowledgement, as it
// was stored (its data is the events' wire encoding), plus these.
const (
	HeaderError      = "Sandstorm-Error"      // the last error: the handler's, the predicate's refusal, or "no acknowledgement"
	HeaderStage      = "Sandstorm-Stage"      // the stage
	HeaderDeliveries = "Sandstorm-Deliveries" // how many times it was delivered
	HeaderStreamSeq  = "Sandstorm-Stream-Seq" // its sequence number in the stage's stream
)

// Limits of a dead-letter stream: the oldest dead letters make room for
// new ones beyond them.
const (
	deadMaxMsgs  = 100_000
	deadMaxBytes = 256 << 20
	deadMaxAge   = 7 * 24 * time.Hour
)

// DeadLetterStream returns the name of the JetStream stream holding a
// durable stage's dead letters (its subject is <prefix>.dlq.<stage>).
func (n *Node) DeadLetterStream(stage string) string { return n.deadStreamName(stage) }

// ensureDeadStream creates (or updates) the dead-letter stream of a
// durable stage: a stream of its own, with limits, that nothing consumes
// (an operator reads it, replays or purges it).
func (n *Node) ensureDeadStream(name string) error {
	cfg := &nats.StreamConfig{
		Name:       n.deadStreamName(name),
		Subjects:   []string{n.deadSubject(name)},
		Retention:  nats.LimitsPolicy,
		MaxMsgs:    deadMaxMsgs,
		MaxBytes:   deadMaxBytes,
		MaxAge:     deadMaxAge,
		Discard:    nats.DiscardOld,
		Duplicates: 2 * time.Minute,
		Storage:    nats.FileStorage,
	}
	_, err := n.js.AddStream(cfg)
	if errors.Is(err, nats.ErrStreamNameAlreadyInUse) {
		_, err = n.js.UpdateStream(cfg)
	}
	if err != nil {
		return fmt.Errorf("remote: durable stage %q: dead-letter stream %s: %w", name, cfg.Name, err)
	}
	return nil
}

// ensureConsumer creates (or updates) the pull consumer every replica of a
// durable stage shares: explicit acks within rc.Timeout, at most
// rc.MaxDeliver deliveries.
func (n *Node) ensureConsumer(name string, rc StageConfig) error {
	cfg := &nats.ConsumerConfig{
		Durable:       name,
		AckPolicy:     nats.AckExplicitPolicy,
		AckWait:       rc.Timeout,
		MaxDeliver:    rc.MaxDeliver,
		FilterSubject: n.durableSubject(name),
	}
	stream := n.streamName(name)
	if _, err := n.js.AddConsumer(stream, cfg); err != nil {
		// It exists with another configuration (an older maxDeliver or
		// timeout): take this one.
		if _, uerr := n.js.UpdateConsumer(stream, cfg); uerr != nil {
			return fmt.Errorf("remote: durable stage %q: consumer: %w", name, errors.Join(err, uerr))
		}
	}
	return nil
}

// maxDeliveriesSubject is the JetStream advisory the server publishes when
// a message of the stage's consumer ran out of deliveries.
func (n *Node) maxDeliveriesSubject(name string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + n.streamName(name) + "." + name
}

// lastDelivery reports whether m is its message's last delivery.
func (d *durableReplica) lastDelivery(m *nats.Msg) bool {
	md, err := m.Metadata()
	return err == nil && md.NumDelivered >= uint64(d.rc.MaxDeliver)
}

// deadLetter moves m, whose last delivery failed with cause, to the
// dead-letter stream and terminates it in the stage's stream. If the
// dead-letter stream does not take it, m is nak'd: the server then
// announces it as out of deliveries and onMaxDeliveries tries again.
func (d *durableReplica) deadLetter(m *nats.Msg, cause error) {
	var seq, dc uint64
	if md, err := m.Metadata(); err == nil {
		seq, dc = md.Sequence.Stream, md.NumDelivered
	}
	if !d.publishDead(m.Data, m.Header.Get(HeaderWire), seq, dc, cause) {
		d.naked.Add(1)
		_ = m.Nak()
		return
	}
	_ = m.Term()
}

// onMaxDeliveries handles the server's advisory that a message ran out of
// deliveries without an answer (its replica died during the last one, or
// took longer than remote.timeout, or its dead letter could not be
// stored): the message, still in the stage's stream, is moved to the
// dead-letter stream. The replicas share the advisory in a queue group:
// one of them handles it.
func (d *durableReplica) onMaxDeliveries(adv *nats.Msg) {
	var a struct {
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
	}
	if err := json.Unmarshal(adv.Data, &a); err != nil || a.StreamSeq == 0 {
		return
	}
	stream := d.n.streamName(d.name)
	raw, err := d.n.js.GetMsg(stream, a.StreamSeq)
	if err != nil {
		return // gone: handled after all, or already a dead letter
	}
	cause := fmt.Errorf("no acknowledgement after %d deliveries (the replica died, its handler took longer than remote.timeout %v, or its dead letter could not be stored)", a.Deliveries, d.rc.Timeout)
	if !d.publishDead(raw.Data, raw.Header.Get(HeaderWire), a.StreamSeq, a.Deliveries, cause) {
		return // stays in the stream; logged
	}
	if err := d.n.js.DeleteMsg(stream, a.StreamSeq); err != nil {
		d.n.log.Debug("remote: dead letter left in its stream", "stage", d.name, "seq", a.StreamSeq, "err", err)
	}
}

// publishDead stores one dead letter (once per stream sequence: the
// publish id is the stream's sequence), keeping the message's wire
// version (HeaderWire, if it had one), and counts and logs it.
func (d *durableReplica) publishDead(data []byte, wire string, seq, deliveries uint64, cause error) bool {
	msg := &nats.Msg{Subject: d.n.deadSubject(d.name), Data: data, Header: nats.Header{}}
	if wire != "" {
		msg.Header.Set(HeaderWire, wire)
	}
	msg.Header.Set(HeaderError, headerValue(cause.Error()))
	msg.Header.Set(HeaderStage, d.name)
	msg.Header.Set(HeaderDeliveries, strconv.FormatUint(deliveries, 10))
	msg.Header.Set(HeaderStreamSeq, strconv.FormatUint(seq, 10))
	opts := []nats.PubOpt{nats.AckWait(2 * time.Second), nats.RetryAttempts(2), nats.RetryWait(50 * time.Millisecond)}
	if seq != 0 {
		opts = append(opts, nats.MsgId(d.n.streamName(d.name)+"-"+strconv.FormatUint(seq, 10)))
	}
	ack, err := d.n.js.PublishMsg(msg, opts...)
	if err != nil {
		d.n.log.Error("remote: dead letter not stored: the event stays in its stream", "stage", d.name, "seq", seq, "err", err)
		return false
	}
	if ack.Duplicate {
		return true // stored before (the advisory and the last delivery both saw it)
	}
	d.deadLettered.Add(1)
	if ok, suppressed := d.warnDead.allow(time.Now()); ok {
		d.n.log.Warn("remote: event moved to the dead-letter stream", "stage", d.name, "deliveries", deliveries,
			"stream", d.n.deadStreamName(d.name), "err", cause, "suppressed", suppressed)
	}
	return true
}

// headerValue makes s fit a NATS header value: one line, at most 1 KiB.
func headerValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}

// rateLimit lets one log line a second through and counts the others.
type rateLimit struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged at now, and how many were
// suppressed since the last one.
func (r *rateLimit) allow(now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < time.Second {
		r.suppressed++
		return false, 0
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return true, n
}
