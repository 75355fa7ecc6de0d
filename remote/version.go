package remote

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// The wire format's version.
//
// A request to a replica and a replica's verdict start with one byte,
// versionMark|WireVersion. The format before versions (version 1, built
// before 2026-11-27) started a request with its operation (1–5) and a
// verdict with its status (0–4), below versionMark: a node still reads
// it, and answers a version-1 request with a version-1 verdict. A durable
// stream message carries its version in the HeaderWire header (none:
// version 1). Heartbeats end with the version (older nodes ignore it).
//
// A node that receives a request of a version newer than its own answers
// an error verdict naming both versions (a *VersionError's text, in a
// *RejectError at the sender); a durable replica naks such a message so
// that a newer replica may take it, and moves it to the dead letters with
// that error on its last delivery. Each refusal is counted
// (remote.<stage>.versionRefused, Node.VersionRefused) and logged at
// WARN, at most one line a second. A malformed HeaderWire (not a version
// number) is no version: the message is a dead letter at once, as one
// that cannot be decoded; a heartbeat whose version does not parse is
// ignored.
const (
	// WireVersion is the version of the wire format this build writes.
	// It also reads every older one.
	WireVersion = 2
	// HeaderWire is the header of a durable stream message that holds its
	// wire version.
	HeaderWire = "Sandstorm-Wire"

	legacyWire  = 1    // the format before versions
	versionMark = 0x80 // set in the first byte of a versioned request or verdict
)

// wireVersionText is WireVersion as HeaderWire carries it.
var wireVersionText = strconv.Itoa(WireVersion)

// VersionError is a message of a wire version this node does not speak
// (a newer build sent it).
type VersionError struct {
	Got int // the message's version
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("remote: message in wire format version %d, this node speaks versions %d to %d (built before it: upgrade this node)",
		e.Got, legacyWire, WireVersion)
}

// readVersion reads the first byte of a request or verdict: the version
// mark and the version, or (version 1) the first field itself, which it
// returns as first.
func readVersion(r *reader) (version int, first byte, err error) {
	b := r.byte()
	if r.err != nil {
		return 0, 0, r.err
	}
	if b&versionMark == 0 {
		return legacyWire, b, nil
	}
	version = int(b &^ versionMark)
	switch {
	case version > WireVersion:
		return version, 0, &VersionError{Got: version}
	case version <= legacyWire:
		return version, 0, fmt.Errorf("remote: bad wire version byte %#x (version 1 has none)", b)
	}
	first = r.byte()
	return version, first, r.err
}

// appendVersion starts a request or verdict of the given version.
func appendVersion(b []byte, version int) []byte {
	if version <= legacyWire {
		return b
	}
	return append(b, versionMark|byte(version))
}

// streamVersion returns the wire version of a durable stream message.
func streamVersion(h nats.Header) (int, error) {
	v := h.Get(HeaderWire)
	if v == "" {
		return legacyWire, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < legacyWire {
		return 0, fmt.Errorf("remote: bad %s header %q", HeaderWire, v)
	}
	if n > WireVersion {
		return n, &VersionError{Got: n}
	}
	return n, nil
}

// withWireVersion returns h (made if nil) with HeaderWire set.
func withWireVersion(h nats.Header) nats.Header {
	if h == nil {
		h = nats.Header{}
	}
	h[HeaderWire] = []string{wireVersionText}
	return h
}

// refusedVersion counts (in count too, if not nil: the stage's) and logs
// (at most one line a second) a message of a version this node does not
// speak, received for stage where.
func (n *Node) refusedVersion(where string, count *atomic.Uint64, err error) {
	n.versionRefused.Add(1)
	if count != nil {
		count.Add(1)
	}
	ok, suppressed := n.warnVersion.allow(time.Now())
	if !ok {
		return
	}
	args := []any{"stage", where, "err", err}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	n.log.Warn("remote: message of a wire version this node does not speak: refused", args...)
}

// VersionRefused returns how many messages this node refused because
// their wire version is newer than its own (requests to its replicas
// and references, durable deliveries).
func (n *Node) VersionRefused() uint64 {
	if n == nil {
		return 0
	}
	return n.versionRefused.Load()
}
