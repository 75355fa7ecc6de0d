package remote

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// SinkRef is a sink.Sink on the wire: the replica instance that holds it
// and its number there. Wire.ImportSink turns it back into a sink: the
// original on its own node, a remote sink anywhere else.
type SinkRef struct {
	Inst string `json:"i"` // the exporting process (Node.Instance)
	Node string `json:"n"` // its node name, for errors
	ID   uint64 `json:"id"`
	Name string `json:"name,omitempty"` // fmt.Sprint of the sink, for errors
}

// Wire is what codecs get from the node encoding or decoding: the way to
// send sinks and other objects with an identity by reference.
type Wire struct {
	n      *Node
	codecs *Codecs

	mu    sync.Mutex
	next  uint64
	sinks map[uint64]sink.Sink
	ids   map[sink.Sink]uint64 // comparable sinks, exported once

	kept keptObjects
}

func newWire(n *Node, c *Codecs, ttl time.Duration) *Wire {
	w := &Wire{n: n, codecs: c, sinks: map[uint64]sink.Sink{}, ids: map[sink.Sink]uint64{}}
	w.kept.init(ttl)
	return w
}

// ExportSink returns the reference of s, which other nodes can send
// events to (its replies). A sink that is itself a reference to another
// node's sink is passed on as that reference. Exported sinks are kept for
// the node's life: export long-lived sinks (stages, connections' reply
// sinks are better sent as Keep'd objects).
func (w *Wire) ExportSink(s sink.Sink) (SinkRef, error) {
	if r, ok := s.(*refSink); ok {
		return r.ref, nil
	}
	comparable := reflect.TypeOf(s).Comparable()
	w.mu.Lock()
	defer w.mu.Unlock()
	if comparable {
		if id, ok := w.ids[s]; ok {
			return w.refLocked(id, s), nil
		}
	}
	w.next++
	id := w.next
	w.sinks[id] = s
	if comparable {
		w.ids[s] = id
	}
	return w.refLocked(id, s), nil
}

func (w *Wire) refLocked(id uint64, s sink.Sink) SinkRef {
	return SinkRef{Inst: w.n.inst, Node: w.n.node, ID: id, Name: sinkName(s)}
}

// sinkName names a sink for errors without reading its fields.
func sinkName(s sink.Sink) string {
	switch v := s.(type) {
	case fmt.Stringer:
		return v.String()
	case interface{ Name() string }:
		return v.Name()
	}
	return fmt.Sprintf("%T", s)
}

// ImportSink returns the sink a reference stands for: the exported sink
// itself on the node that exported it, elsewhere a remote sink whose
// enqueues travel to it in request mode.
func (w *Wire) ImportSink(r SinkRef) sink.Sink {
	if r.Inst == w.n.inst {
		if s := w.exported(r.ID); s != nil {
			return s
		}
	}
	return w.n.refSink(r)
}

func (w *Wire) exported(id uint64) sink.Sink {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sinks[id]
}

// Keep stores v (a per-request object with an identity, such as an HTTP
// request waiting for its response) under a number another node can send
// back; Take returns it once. Objects nobody took are forgotten after the
// node's KeepTTL.
func (w *Wire) Keep(v any) uint64 { return w.kept.put(v) }

// Take returns and forgets the object Keep stored under id.
func (w *Wire) Take(id uint64) (any, bool) { return w.kept.take(id) }

// Release forgets the kept object v (compared with ==: a pointer) and
// reports whether it was still kept: of Release and Take, the first wins,
// so an object answered another way (its replica left, see
// ReplicaWatcher) is answered once. It looks through every kept object:
// call it on rare paths.
func (w *Wire) Release(v any) bool {
	if v == nil || !reflect.TypeOf(v).Comparable() {
		return false
	}
	return w.kept.release(v)
}

// Instance returns the identity of this process on the wire (SinkRef.Inst).
func (w *Wire) Instance() string { return w.n.inst }

// keptObjects holds objects for a while in two generations: an object
// lives between one and two TTLs unless it is taken.
type keptObjects struct {
	mu        sync.Mutex
	ttl       time.Duration
	next      uint64
	cur, prev map[uint64]any
	rotated   time.Time
}

func (k *keptObjects) init(ttl time.Duration) {
	k.ttl, k.cur, k.prev, k.rotated = ttl, map[uint64]any{}, map[uint64]any{}, time.Now()
}

func (k *keptObjects) put(v any) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if now := time.Now(); now.Sub(k.rotated) > k.ttl {
		k.prev, k.cur, k.rotated = k.cur, map[uint64]any{}, now
	}
	k.next++
	k.cur[k.next] = v
	return k.next
}

func (k *keptObjects) take(id uint64) (any, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if v, ok := k.cur[id]; ok {
		delete(k.cur, id)
		return v, true
	}
	if v, ok := k.prev[id]; ok {
		delete(k.prev, id)
		return v, true
	}
	return nil, false
}

func (k *keptObjects) release(v any) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, gen := range []map[uint64]any{k.cur, k.prev} {
		for id, x := range gen {
			if x == v {
				delete(gen, id)
				return true
			}
		}
	}
	return false
}

// ---- messages ----

// Operations of a request.
const (
	opEnqueue byte = iota + 1 // all or nothing (Enqueue, EnqueueMany)
	opPrepare
	opCommit
	opAbort
	opEach // every group of events decided on its own (concurrent Enqueues and EnqueueManys combined)
)

// request is the body of a message to a replica.
type request struct {
	version int // its wire version: its verdict is written in it
	op      byte
	id      string // idempotency key
	from    string // sending stage ("" outside stages)
	ref     uint64 // 0: the stage; else an exported sink
	events  []sink.Event
	// groups, for opEach, are the sizes of the groups events is made of,
	// in order: each group is decided all or nothing, on its own (one
	// Enqueue's event, or one EnqueueMany's); nil: every event alone.
	groups []int
	pooled *[]sink.Event // events' slice comes from eventSlices (see release)
}

var errShort = errors.New("remote: truncated message")

func carriesEvents(op byte) bool { return op == opEnqueue || op == opPrepare || op == opEach }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if uint64(len(r.b)) < n {
		r.err = errShort
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errShort
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// encodeEvents appends the events to b, each as its codec's name and
// bytes; an event of the same codec as the one before it has an empty
// name instead (no codec is named "": see Codecs.Add), so that a batch of
// one type carries its codec's name once.
func (w *Wire) encodeEvents(b []byte, stage string, es []sink.Event) ([]byte, error) {
	b, _, err := w.appendEvents(binary.AppendUvarint(b, uint64(len(es))), stage, es)
	return b, err
}

// appendEvents appends the events as encodeEvents does, without their
// count, the first one named; it returns the codec of the last one.
func (w *Wire) appendEvents(b []byte, stage string, es []sink.Event) ([]byte, *Codec, error) {
	var err error
	var last *Codec // a batch is usually of one type: look it up once
	for _, e := range es {
		prev := last
		if last, err = w.codecOf(stage, e, last); err != nil {
			return nil, nil, err
		}
		b = appendCodecName(b, last, prev)
		if b, err = w.appendEventData(b, stage, last, e); err != nil {
			return nil, nil, err
		}
	}
	return b, last, nil
}

// codecOf returns e's codec: last if e is of its type.
func (w *Wire) codecOf(stage string, e sink.Event, last *Codec) (*Codec, error) {
	t := reflect.TypeOf(e)
	if t == nil {
		return nil, &codecError{stage: stage, typ: t}
	}
	if last != nil && last.Type == t {
		return last, nil
	}
	if cd := w.codecs.forType(t); cd != nil {
		return cd, nil
	}
	return nil, &codecError{stage: stage, typ: t}
}

// appendCodecName appends cd's name, or an empty one if the event
// before it in the message had the same codec (prev).
func appendCodecName(b []byte, cd, prev *Codec) []byte {
	if cd == prev {
		return append(b, 0)
	}
	return appendString(b, cd.Name)
}

// appendEventData appends e's bytes, encoded by its codec cd, preceded by
// their length.
func (w *Wire) appendEventData(b []byte, stage string, cd *Codec, e sink.Event) ([]byte, error) {
	if cd.appendTo != nil {
		b, err := appendLengthPrefixed(b, func(b []byte) ([]byte, error) { return cd.appendTo(b, e) })
		if err != nil {
			return nil, &codecError{stage: stage, typ: cd.Type, err: err}
		}
		return b, nil
	}
	data, err := cd.Encode(w, e)
	if err != nil {
		return nil, &codecError{stage: stage, typ: cd.Type, err: err}
	}
	return appendBytes(b, data), nil
}

// appendLengthPrefixed appends what add appends to b, preceded by its
// length as a uvarint (as appendBytes would write it). One byte is kept
// for the length first, so that an encoding under 128 bytes (most
// events) is not moved.
func appendLengthPrefixed(b []byte, add func([]byte) ([]byte, error)) ([]byte, error) {
	start := len(b)
	b, err := add(append(b, 0))
	if err != nil {
		return nil, err
	}
	n := len(b) - start - 1
	if n < 0x80 {
		b[start] = byte(n)
		return b, nil
	}
	var prefix [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(prefix[:], uint64(n))
	b = append(b, prefix[1:k]...) // room for the rest of the prefix
	copy(b[start+k:], b[start+1:start+1+n])
	copy(b[start:], prefix[:k])
	return b, nil
}

// requestHeader starts a request's bytes: its wire version (WireVersion),
// operation, idempotency key, sending stage and target.
func requestHeader(b []byte, op byte, id, from string, ref uint64) []byte {
	b = appendVersion(b, WireVersion)
	b = append(b, op)
	b = appendString(b, id)
	b = appendString(b, from)
	return binary.AppendUvarint(b, ref)
}

// decodeEvents reads the events of a message. A run of events of one
// codec that can decode several at once (decodeRun: JSON) is decoded
// together.
func (w *Wire) decodeEvents(r *reader) ([]sink.Event, error) {
	return w.decodeEventsInto(r, nil)
}

// decodeEventsInto is decodeEvents appending to es[:0] (grown if it is
// too small).
func (w *Wire) decodeEventsInto(r *reader, es []sink.Event) ([]sink.Event, error) {
	n := r.uvarint()
	if r.err != nil {
		return nil, r.err
	}
	if n > uint64(len(r.b)) {
		return nil, errShort
	}
	es = slices.Grow(es[:0], int(n))
	var run [][]byte // events of codec last waiting for decodeRun (from runBuffers at its first)
	var pooled *[][]byte
	defer func() {
		if pooled != nil {
			clear(run[:cap(run)]) // hold no message
			*pooled = run[:0]
			runBuffers.Put(pooled)
		}
	}()
	var last *Codec
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		var ok bool
		if len(run) > 1 {
			es, ok = decodeRunSplit(last.decodeRun, run, es)
		}
		if !ok {
			for _, data := range run {
				e, err := last.Decode(w, data)
				if err != nil {
					return fmt.Errorf("remote: decoding %s: %w", last.Name, err)
				}
				es = append(es, e)
			}
		}
		run = run[:0]
		return nil
	}
	for range n {
		name := r.bytes()
		data := r.bytes()
		if r.err != nil {
			return nil, r.err
		}
		switch {
		case len(name) == 0:
			if last == nil {
				return nil, fmt.Errorf("%w: an event without a codec name opens the message", ErrNoCodec)
			}
		case last == nil || last.Name != string(name):
			if err := flush(); err != nil {
				return nil, err
			}
			if last = w.codecs.forName(string(name)); last == nil {
				return nil, fmt.Errorf("%w: no codec named %q on this node", ErrNoCodec, name)
			}
		}
		if last.decodeRun != nil {
			if pooled == nil {
				pooled = runBuffers.Get().(*[][]byte)
				run = (*pooled)[:0]
			}
			run = append(run, data)
			continue
		}
		e, err := last.Decode(w, data)
		if err != nil {
			return nil, fmt.Errorf("remote: decoding %s: %w", last.Name, err)
		}
		es = append(es, e)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return es, nil
}

// runBuffers holds the slices decodeEvents gathers runs in.
var runBuffers = sync.Pool{New: func() any { return new([][]byte) }}

// splitRunAt and splitRunBytes are the length and the encoded size from
// which a run is decoded on two goroutines (if the process has two
// CPUs): a replica decodes one request at a time per subscription, while
// the senders of the events it carries wait for its verdict, so its
// decoding is most of their round trip. A run of few bytes is decoded
// faster than another goroutine is started and waited for (2026-11-27,
// requests of 64 binary events of 5 bytes, pairs of runs: the replica's
// handler took 10.5 and 12.2 µs a request decoding on one goroutine,
// 12.1 and 13.7 µs splitting).
const (
	splitRunAt    = 32
	splitRunBytes = 1 << 10
)

// largeRun reports whether run is long and large enough to be decoded
// on two goroutines: at least splitRunAt events of splitRunBytes.
func largeRun(run [][]byte) bool {
	if len(run) < splitRunAt {
		return false
	}
	n := 0
	for _, data := range run {
		if n += len(data); n >= splitRunBytes {
			return true
		}
	}
	return false
}

// decodeRunSplit decodes a run with decode, its second half on another
// goroutine when it is long and large enough; ok as decode's (es as it
// came if not).
func decodeRunSplit(decode func(items [][]byte, es []sink.Event) ([]sink.Event, bool), run [][]byte, es []sink.Event) (_ []sink.Event, ok bool) {
	if !largeRun(run) || runtime.GOMAXPROCS(0) < 2 {
		return decode(run, es)
	}
	before, half := len(es), len(run)/2
	es = slices.Grow(es, len(run))
	// The second half is decoded into its place in es's array, which the
	// first half's appends do not reach.
	tail := es[before+half : before+half]
	var tailOK bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		tail, tailOK = decode(run[half:], tail)
	}()
	es, ok = decode(run[:half], es)
	<-done
	if !ok || !tailOK || len(es) != before+half || len(tail) != len(run)-half {
		return es[:before], false
	}
	return es[:before+len(run)], true
}

// encodeRequest appends q to b.
func (w *Wire) encodeRequest(b []byte, q *request, stage string) ([]byte, error) {
	b = requestHeader(b, q.op, q.id, q.from, q.ref)
	if !carriesEvents(q.op) {
		return b, nil
	}
	if q.op == opEach {
		b = appendGroups(b, q.groups, len(q.events))
	}
	return w.encodeEvents(b, stage, q.events)
}

// appendGroups appends the sizes of an opEach request's groups: their
// count, then each size (nil: n groups of one event).
func appendGroups(b []byte, groups []int, n int) []byte {
	if groups == nil {
		b = binary.AppendUvarint(b, uint64(n))
		for range n {
			b = append(b, 1)
		}
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(groups)))
	for _, g := range groups {
		b = binary.AppendUvarint(b, uint64(g))
	}
	return b
}

// readGroups reads what appendGroups wrote, checking that no group is
// empty, and returns the groups' sizes and how many events they hold:
// nil if every group is of one event (combined Enqueues: nothing to
// allocate).
func readGroups(r *reader) (groups []int, events int, err error) {
	n := r.uvarint()
	if r.err != nil {
		return nil, 0, r.err
	}
	if n > uint64(len(r.b)) {
		return nil, 0, errShort
	}
	for i := range int(n) {
		g := r.uvarint()
		if r.err != nil {
			return nil, 0, r.err
		}
		if g == 0 || g > uint64(len(r.b)) {
			return nil, 0, fmt.Errorf("remote: bad group of %d events", g)
		}
		if g > 1 && groups == nil {
			groups = make([]int, i, n)
			for j := range groups {
				groups[j] = 1
			}
		}
		if groups != nil {
			groups = append(groups, int(g))
		}
		events += int(g)
	}
	return groups, events, nil
}

// decodeRequest reads a request of any version this node speaks; one of
// a newer version is a *VersionError. Whatever the error, q says the
// version to answer in: the request's, or WireVersion if it has none
// this node speaks.
func (w *Wire) decodeRequest(data []byte) (*request, error) {
	r := &reader{b: data}
	version, op, err := readVersion(r)
	if err != nil {
		return &request{version: WireVersion}, err
	}
	q := &request{version: version, op: op, id: string(r.bytes()), from: string(r.bytes()), ref: r.uvarint()}
	if r.err != nil {
		return q, r.err
	}
	if !carriesEvents(q.op) {
		return q, nil
	}
	grouped := -1 // the events an opEach request's groups hold
	if q.op == opEach {
		var err error
		if q.groups, grouped, err = readGroups(r); err != nil {
			return q, err
		}
	}
	var into []sink.Event
	if q.op != opPrepare { // a prepared transaction may hold its events
		q.pooled = eventSlices.Get().(*[]sink.Event)
		into = *q.pooled
	}
	es, err := w.decodeEventsInto(r, into)
	q.events = es
	if err == nil && grouped >= 0 && grouped != len(es) {
		err = fmt.Errorf("remote: groups of %d events in all, for %d events", grouped, len(es))
	}
	return q, err
}

// eventSlices holds the slices a replica decodes a request's events in
// when it is done with them once decided: the stage's queue keeps the
// events, not the slice (about a fifth of the bytes a replica allocated
// in EnqueueMany).
var eventSlices = sync.Pool{New: func() any { return new([]sink.Event) }}

// release gives the request's events slice back to eventSlices, if it
// came from there: call it once q is decided, and use q.events no more.
func (q *request) release() {
	if q == nil || q.pooled == nil || cap(q.events) > 4096 {
		return
	}
	clear(q.events)
	*q.pooled = q.events[:0]
	eventSlices.Put(q.pooled)
	q.pooled, q.events = nil, nil
}

// Verdict statuses.
const (
	statusOK byte = iota
	statusRejected
	statusClosed
	statusError // the replica could not decode or find the target
	statusEach  // one verdict per event follows
	// statusNotHeld: a transaction's outcome for an id the replica does
	// not hold (never prepared there, or forgotten: its idempotency
	// record retired early), so it cannot say what became of it. Added
	// in wire version 2 without a version change: a sender built before
	// it decodes it as a rejection (any status but ok and each carries
	// its detail), which is what it got before; a version-1 request gets
	// statusRejected instead (see encodeVerdict).
	statusNotHeld
)

// verdict is a replica's answer.
type verdict struct {
	status byte
	len    int    // the replica's queue length after the decision
	inst   string // the replica instance
	detail verdictDetail
	each   []byte          // statusEach: every event's status
	why    []verdictDetail // statusEach: the details of the events not admitted, in order
}

type verdictDetail struct {
	Node      string `json:"node,omitempty"`
	Stage     string `json:"stage,omitempty"`
	Predicate string `json:"pred,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// encodeVerdict writes v in the given wire version (the request's).
func encodeVerdict(v *verdict, version int) []byte {
	b := make([]byte, 0, 32)
	b = appendVersion(b, version)
	status := v.status
	if status == statusNotHeld && version <= legacyWire {
		status = statusRejected // version 1 knows statuses 0–4
	}
	b = append(b, status)
	b = binary.AppendUvarint(b, uint64(max(v.len, 0)))
	b = appendString(b, v.inst)
	switch status {
	case statusOK:
	case statusEach:
		b = appendBytes(b, v.each)
		if len(v.why) > 0 {
			d, _ := json.Marshal(v.why)
			b = append(b, d...)
		}
	default:
		d, _ := json.Marshal(v.detail)
		b = append(b, d...)
	}
	return b
}

func decodeVerdict(data []byte) (*verdict, error) {
	r := &reader{b: data}
	_, status, err := readVersion(r)
	if err != nil {
		return nil, fmt.Errorf("remote: bad verdict: %w", err)
	}
	v := &verdict{status: status, len: int(r.uvarint()), inst: string(r.bytes())}
	if r.err != nil {
		return nil, r.err
	}
	switch v.status {
	case statusOK:
	case statusEach:
		v.each = r.bytes()
		if r.err != nil {
			return nil, r.err
		}
		if len(r.b) > 0 {
			if err := json.Unmarshal(r.b, &v.why); err != nil {
				return nil, fmt.Errorf("remote: bad verdict: %w", err)
			}
		}
	default:
		if err := json.Unmarshal(r.b, &v.detail); err != nil {
			return nil, fmt.Errorf("remote: bad verdict: %w", err)
		}
	}
	return v, nil
}

// err turns a verdict into the error Enqueue returns.
func (v *verdict) err() error {
	switch v.status {
	case statusOK:
		return nil
	case statusClosed:
		return &ClosedError{Node: v.detail.Node, Stage: v.detail.Stage}
	default:
		return &RejectError{Node: v.detail.Node, Stage: v.detail.Stage, Predicate: v.detail.Predicate, Reason: v.detail.Reason}
	}
}

// RejectError is a remote rejection: which node's replica of which stage
// refused, by which predicate ("" for a full queue or a transport
// failure) and why. It wraps sink.ErrRejected.
type RejectError struct {
	Node, Stage, Predicate, Reason string
}

func (e *RejectError) Error() string {
	s := fmt.Sprintf("remote: stage %q", e.Stage)
	if e.Node != "" {
		s += fmt.Sprintf(" on node %q", e.Node)
	}
	s += ": enqueue rejected"
	if e.Predicate != "" {
		s += " by predicate " + e.Predicate
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns sink.ErrRejected.
func (e *RejectError) Unwrap() error { return sink.ErrRejected }

// ClosedError is a remote stage that is shut down or destroyed. It wraps
// sink.ErrClosed.
type ClosedError struct{ Node, Stage string }

func (e *ClosedError) Error() string {
	return fmt.Sprintf("remote: stage %q on node %q: closed", e.Stage, e.Node)
}

// Unwrap returns sink.ErrClosed.
func (e *ClosedError) Unwrap() error { return sink.ErrClosed }
