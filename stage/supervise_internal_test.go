package stage

import (
	"context"
	"testing"
)

// treeOwned reports whether the supervisor goroutine owns the state (it
// is not in sv.idle). Only for a test that runs nothing else meanwhile.
func (sv *supervision) treeOwned() bool {
	select {
	case st := <-sv.idle:
		sv.idle <- st
		return false
	default:
		return true
	}
}

// TestSupervisionHandsTheTreeOver: the state is in sv.idle before Start,
// owned by the supervisor goroutine while it runs, and handed back when
// it returns at Shutdown.
func TestSupervisionHandsTheTreeOver(t *testing.T) {
	m := NewManager(Options{})
	noop := func() Handler { return HandlerFunc(nil) }
	if _, err := m.CreateSupervised("A", noop, StageConfig{}); err != nil {
		t.Fatal(err)
	}
	if m.sup.treeOwned() {
		t.Fatal("owned before Start")
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !m.sup.treeOwned() {
		t.Fatal("not owned by the supervisor while running")
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.sup.done:
	default:
		t.Fatal("supervisor goroutine still running after Shutdown")
	}
	if m.sup.treeOwned() {
		t.Fatal("tree not handed back after the supervisor returned")
	}
	if got := m.Supervisors(); len(got) != 1 || got[0] != "A" {
		t.Fatalf("supervisors %v", got)
	}
}
