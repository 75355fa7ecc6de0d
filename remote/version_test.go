package remote

import (
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// futureVersion is a request of version WireVersion+1: a newer build's.
func futureVersion(b []byte) []byte {
	return append([]byte{versionMark | byte(WireVersion+1)}, b[1:]...)
}

func TestRequestVersions(t *testing.T) {
	w := testWire()
	current, err := w.encodeRequest(nil, &request{op: opEnqueue, id: "a.1", events: []sink.Event{point{1, 2}}}, "S")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		data        []byte
		wantVersion int    // of a request decoded
		wantErr     string // "": decoded
		versionErr  bool   // the error is a *VersionError
	}{
		{name: "this build's", data: current, wantVersion: WireVersion},
		{name: "version 1 (before versions: the operation first)", data: current[1:], wantVersion: legacyWire},
		{name: "a newer build's", data: futureVersion(current),
			wantErr: "wire format version 3, this node speaks versions 1 to 2", versionErr: true},
		{name: "version 1 marked", data: append([]byte{versionMark | legacyWire}, current[1:]...), wantErr: "bad wire version byte 0x81"},
		{name: "empty", data: nil, wantErr: errShort.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := w.decodeRequest(tc.data)
			defer q.release()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if q.version != tc.wantVersion || q.op != opEnqueue || q.id != "a.1" || !reflect.DeepEqual(q.events, []sink.Event{point{1, 2}}) {
					t.Fatalf("decoded version %d op %d id %q events %v", q.version, q.op, q.id, q.events)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
			if _, ok := errors.AsType[*VersionError](err); ok != tc.versionErr {
				t.Fatalf("a *VersionError: %v, want %v", ok, tc.versionErr)
			}
			if q.version != WireVersion {
				t.Fatalf("answered in version %d, want this build's (%d)", q.version, WireVersion)
			}
		})
	}
}

// versionGraph hosts Work (request mode), Store (durable, one delivery:
// a message refused on it is a dead letter at once) and Keep (durable,
// three deliveries) on node b.
const versionGraph = `
global:
  cluster: {node: b}
stages:
  Work:  {handler: t.Work, nodes: [b]}
  Store:
    handler: t.Work
    nodes: [b]
    remote: {mode: durable, maxDeliver: 1}
  Keep:
    handler: t.Work
    nodes: [b]
    remote: {mode: durable, maxDeliver: 3, nakDelay: 10ms}
`

// versionNode starts node b of versionGraph, logging into a buffer.
func versionNode(t *testing.T) (*Node, *stage.Manager, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	n, err := Join(ClusterConfig{Node: "b"}, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	cfg, err := stage.ParseConfig([]byte(versionGraph), "version.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg := stage.NewRegistry()
	reg.Register("t.Work", func() stage.Handler { return stage.HandlerFunc(func([]sink.Event) error { return nil }) })
	m, err := n.NewManager(cfg, reg, stage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(t.Context()) })
	return n, m, logs
}

// A request of a newer wire version gets an error verdict naming both
// versions, which its sender returns as a rejection; the replica counts
// and logs it. A request of this build's version is still admitted.
func TestNewerRequestVersionRefused(t *testing.T) {
	n, m, logs := versionNode(t)
	send := func(data []byte) error {
		t.Helper()
		reply, err := n.nc.Request(n.stageSubject("Work"), data, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		v, err := decodeVerdict(reply.Data)
		if err != nil {
			t.Fatal(err)
		}
		return v.err()
	}
	current, err := n.wire.encodeRequest(nil, &request{op: opEnqueue, id: n.inst + ".1", events: []sink.Event{"x"}}, "Work")
	if err != nil {
		t.Fatal(err)
	}
	if err := send(current); err != nil {
		t.Fatalf("a request of this build's version: %v", err)
	}
	// A node built before versions sends version 1, and reads only a
	// version-1 verdict: its status first.
	old, err := n.nc.Request(n.stageSubject("Work"), current[1:], 10*time.Second)
	if err != nil || len(old.Data) == 0 || old.Data[0] != statusOK {
		t.Fatalf("the verdict on a version-1 request: % x, %v; want one starting with its status", old.Data, err)
	}
	err = send(futureVersion(current))
	if !errors.Is(err, sink.ErrRejected) || !strings.Contains(err.Error(), "version 3, this node speaks versions 1 to 2") {
		t.Fatalf("a request of version 3: %v, want a rejection naming both versions", err)
	}
	if got := n.VersionRefused(); got != 1 {
		t.Errorf("VersionRefused() = %d, want 1", got)
	}
	if got, ok := m.Metrics().Get("remote.Work.versionRefused").(interface{ Value() int64 }); !ok || got.Value() != 1 {
		t.Errorf("remote.Work.versionRefused = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), `msg="remote: message of a wire version this node does not speak: refused" node=b stage=Work`) {
		t.Errorf("no WARN line:\n%s", logs.String())
	}
}

// A durable stream message of a newer wire version is refused by the
// replica, counted, and (on its last delivery) moved to the dead letters
// with the error naming both versions: never silently dropped. One whose
// version header is malformed is no version: a dead letter at once, as
// an undecodable message, not counted as a version refused.
func TestStreamVersionDeadLetters(t *testing.T) {
	for _, tc := range []struct {
		name, stage, header string
		wantErr             string
		wantRefused         uint64
		wantDeliveries      string
	}{
		{name: "newer", stage: "Store", header: "3", wantErr: "version 3, this node speaks versions 1 to 2", wantRefused: 1, wantDeliveries: "1"},
		{name: "newer, refused on each delivery", stage: "Keep", header: "3", wantErr: "version 3, this node speaks versions 1 to 2",
			wantRefused: 3, wantDeliveries: "3"},
		{name: "malformed, at once", stage: "Keep", header: "two", wantErr: `cannot be decoded: remote: bad Sandstorm-Wire header "two"`,
			wantDeliveries: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, _, _ := versionNode(t)
			data, err := n.wire.encodeEvents(nil, tc.stage, []sink.Event{"x"})
			if err != nil {
				t.Fatal(err)
			}
			msg := &nats.Msg{Subject: n.durableSubject(tc.stage), Data: data, Header: nats.Header{HeaderWire: []string{tc.header}}}
			if _, err := n.js.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
			var letter *nats.RawStreamMsg
			deadline := time.Now().Add(20 * time.Second) // a hang guard
			for letter == nil {
				letter, _ = n.js.GetLastMsg(n.deadStreamName(tc.stage), n.deadSubject(tc.stage))
				if letter == nil && time.Now().After(deadline) {
					t.Fatalf("the message with %s %q never reached the dead letters", HeaderWire, tc.header)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got := letter.Header.Get(HeaderError); !strings.Contains(got, tc.wantErr) {
				t.Errorf("dead letter's %s = %q, want %q", HeaderError, got, tc.wantErr)
			}
			if got := letter.Header.Get(HeaderWire); got != tc.header {
				t.Errorf("dead letter's %s = %q, want the message's (%s)", HeaderWire, got, tc.header)
			}
			if got := letter.Header.Get(HeaderDeliveries); got != tc.wantDeliveries {
				t.Errorf("dead letter's %s = %q, want %s", HeaderDeliveries, got, tc.wantDeliveries)
			}
			if got := n.VersionRefused(); got != tc.wantRefused {
				t.Errorf("VersionRefused() = %d, want %d", got, tc.wantRefused)
			}
		})
	}
}

// A heartbeat whose trailing version does not parse is malformed:
// ignored (no replica heard, no version logged), where one of version 1
// (no version) or of this build's is heard.
func TestHeartbeatVersion(t *testing.T) {
	for _, tc := range []struct {
		name      string
		trailer   []byte
		wantHeard bool
		wantWire  int64
	}{
		{name: "version 1: ends with the length", trailer: nil, wantHeard: true, wantWire: legacyWire},
		{name: "this build's", trailer: []byte{WireVersion}, wantHeard: true, wantWire: WireVersion},
		{name: "a newer one", trailer: []byte{WireVersion + 1}, wantHeard: true, wantWire: WireVersion + 1},
		{name: "cut version", trailer: []byte{0x80}},
		{name: "version 0", trailer: []byte{0}},
	} {
		s, _, logs := watchedSender(t, StageConfig{})
		b := appendString(nil, "ib")
		b = appendString(b, "wb")
		b = append(b, 3) // queue length
		b = append(b, tc.trailer...)
		s.heartbeat(&nats.Msg{Data: b})
		s.mu.Lock()
		rs := s.replicas["ib"]
		s.mu.Unlock()
		if (rs != nil) != tc.wantHeard {
			t.Errorf("%s: heard = %v, want %v", tc.name, rs != nil, tc.wantHeard)
			continue
		}
		if rs != nil && rs.wire.Load() != tc.wantWire {
			t.Errorf("%s: wire %d, want %d", tc.name, rs.wire.Load(), tc.wantWire)
		}
		if got := logs.take(); !tc.wantHeard && got != "" {
			t.Errorf("%s: logged %q", tc.name, got)
		}
	}
}
