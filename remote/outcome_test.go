package remote

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// countedTxn counts its Commits and Aborts.
type countedTxn struct {
	mu              sync.Mutex
	commits, aborts int
}

func (c *countedTxn) Commit() { c.mu.Lock(); c.commits++; c.mu.Unlock() }
func (c *countedTxn) Abort()  { c.mu.Lock(); c.aborts++; c.mu.Unlock() }

// TestTxnOutcomeOnce: a replica decides a transaction's outcome once per
// id, whatever comes first (its Commit, its Abort, its expiry), and
// answers every later outcome request with that decision: a Commit sent
// again is confirmed again without committing twice; a Commit after an
// abort or an expiry is refused, naming why; an id it does not hold
// (never prepared, or forgotten) gets statusNotHeld: not a refusal, the
// outcome is unknown.
func TestTxnOutcomeOnce(t *testing.T) {
	tests := []struct {
		name                 string
		first                byte   // the outcome that settles it (0: expiry)
		then                 byte   // the outcome asked for afterwards
		unknown              bool   // the id was never prepared here
		wantStatus           byte   // of the later request's verdict
		wantReason           string // in the later verdict's reason
		wantCommits, wantAbt int
	}{
		{name: "commit sent again", first: opCommit, then: opCommit, wantStatus: statusOK, wantCommits: 1},
		{name: "commit after its abort", first: opAbort, then: opCommit, wantStatus: statusRejected,
			wantReason: "transaction aborted (by its sender)", wantAbt: 1},
		{name: "abort sent again", first: opAbort, then: opAbort, wantStatus: statusRejected,
			wantReason: "transaction aborted (by its sender)", wantAbt: 1},
		{name: "commit after the expiry", first: 0, then: opCommit, wantStatus: statusRejected,
			wantReason: "not committed within the duplicates window", wantAbt: 1},
		{name: "commit of an id never prepared here (or forgotten)", unknown: true, then: opCommit, wantStatus: statusNotHeld,
			wantReason: "no such transaction"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &replica{n: &Node{log: slog.New(slog.DiscardHandler)}, name: "Work",
				seen: newDedup(time.Minute, dedupLimit, time.Now), txns: map[string]*heldTxn{}}
			txn := &countedTxn{}
			if !tc.unknown {
				r.txns["k1"] = &heldTxn{t: txn, timer: time.NewTimer(time.Hour)}
				why := "(by its sender)"
				op := tc.first
				if op == 0 {
					op, why = opAbort, "(not committed within the duplicates window)"
				}
				if _, settled := r.end("k1", op, why); !settled {
					t.Fatal("the first outcome did not settle the transaction")
				}
			}
			v, settled := r.end("k1", tc.then, "(by its sender)")
			if settled {
				t.Fatal("a later outcome settled the transaction again")
			}
			if v.status != tc.wantStatus || !strings.Contains(v.detail.Reason, tc.wantReason) {
				t.Fatalf("later verdict %d %q; want %d saying %q", v.status, v.detail.Reason, tc.wantStatus, tc.wantReason)
			}
			if txn.commits != tc.wantCommits || txn.aborts != tc.wantAbt {
				t.Fatalf("%d commits, %d aborts; want %d, %d", txn.commits, txn.aborts, tc.wantCommits, tc.wantAbt)
			}
		})
	}
}

var _ sink.Txn = (*countedTxn)(nil)

// TestNotHeldOnTheWire: statusNotHeld reaches a sender of the current
// wire version as itself, and one that predates it (any status but ok
// and each carries its detail) as a rejection, which is what it got
// before; a version-1 request gets statusRejected.
func TestNotHeldOnTheWire(t *testing.T) {
	tests := []struct {
		name       string
		version    int
		wantStatus byte
	}{
		{name: "current version", version: WireVersion, wantStatus: statusNotHeld},
		{name: "version 1", version: legacyWire, wantStatus: statusRejected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sent := &verdict{status: statusNotHeld, inst: "ib1", detail: verdictDetail{Node: "b", Reason: "no such transaction held here"}}
			v, err := decodeVerdict(encodeVerdict(sent, tc.version))
			if err != nil {
				t.Fatal(err)
			}
			if v.status != tc.wantStatus || v.detail != sent.detail || !errors.Is(v.err(), sink.ErrRejected) {
				t.Fatalf("decoded status %d, detail %+v, err %v; want status %d, the detail, a rejection", v.status, v.detail, v.err(), tc.wantStatus)
			}
		})
	}
}
