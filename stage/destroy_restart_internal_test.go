package stage

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestDestroyStageContextAbandonsHungRestart: a supervised stage's handler
// crashes and its restart hangs in the new handler's Init, holding the
// stage. DestroyStageContext returns when its context ends, with an error
// that wraps ErrNotStopped and the context's error and names the stage and
// the restart's step; the stage is gone at once. Once Init returns, the
// handler it initialized is destroyed (every handler initialized is
// destroyed exactly once), the goroutine left waiting for the stage ends,
// and the manager shuts down cleanly.
func TestDestroyStageContextAbandonsHungRestart(t *testing.T) {
	m, h, logs := newHungRestart(t, "init")
	inits, destroys := h.inits, h.destroys

	destroy := func(ctx context.Context) error { return m.DestroyStageContext(ctx, "S") }
	callAbandoningRestart(t, "DestroyStageContext", 200*time.Millisecond, destroy,
		`"S"`, "supervisor restart", "in the new handler's Init")
	if _, ok := m.Stage("S"); ok {
		t.Fatal("stage S still in the manager")
	}
	if d := destroys.Load(); d != 1 {
		t.Fatalf("%d handlers destroyed while Init hangs, want 1 (the crashed one)", d)
	}

	h.release()
	deadline := time.Now().Add(20 * time.Second)
	for destroys.Load() != 2 || waitingForStage() {
		if time.Now().After(deadline) {
			t.Fatalf("after Init returned: %d handlers destroyed (want 2), still waiting for the stage: %v",
				destroys.Load(), waitingForStage())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if i, d := inits.Load(), destroys.Load(); i != 2 || d != 2 {
		t.Fatalf("%d handlers initialized, %d destroyed; want 2 and 2", i, d)
	}
	if !strings.Contains(logs.String(), "abandoned restart finished") {
		t.Fatalf("late end of the stage not logged:\n%s", logs.String())
	}
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := m.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case <-m.sup.done:
	default:
		t.Fatal("supervisor goroutine outlived Shutdown")
	}
	m.sup.wg.Wait() // its workers
	if d := destroys.Load(); d != 2 {
		t.Fatalf("%d handlers destroyed after Shutdown, want 2", d)
	}
}

// TestDestroyStageContextWithoutRestart: with no restart holding the
// stage, DestroyStageContext destroys its handler before it returns, and
// leaves no goroutine behind.
func TestDestroyStageContextWithoutRestart(t *testing.T) {
	m := NewManager(Options{})
	destroys := createCounted(t, m)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Shutdown(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.DestroyStageContext(ctx, "S"); err != nil {
		t.Fatalf("DestroyStageContext: %v", err)
	}
	if d := destroys.Load(); d != 1 {
		t.Fatalf("handler destroyed %d times, want 1", d)
	}
	if waitingForStage() {
		t.Fatal("a goroutine waits for the stage")
	}
}

// waitingForStage reports whether a goroutine is still waiting for a
// stage's end: endStages (DestroyStage, Shutdown) or a restart worker.
func waitingForStage() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			s := string(buf[:n])
			return strings.Contains(s, "stage.(*Manager).endStages") || strings.Contains(s, "stage.(*Manager).endTaken")
		}
		buf = make([]byte, 2*len(buf))
	}
}
