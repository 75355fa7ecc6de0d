package stage

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

// TestHeapFloorPercent: the percent puts the next collection at about the
// floor while the live heap is under it, never under base, capped at
// heapFloorMaxPercent; GOGC=off and a zero floor leave base.
func TestHeapFloorPercent(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name        string
		base        int
		floor, live uint64
		want        int
	}{
		{"floor off", 100, 0, 4 * mib, 100},
		{"GOGC=off", -1, 64 * mib, 4 * mib, -1},
		{"no cycle yet: the cap", 100, 64 * mib, 0, heapFloorMaxPercent},
		{"live a 16th of the floor: capped", 100, 64 * mib, 4 * mib, heapFloorMaxPercent},
		{"live an 11th: just the cap", 100, 66 * mib, 6 * mib, 1000},
		{"live a 10th: under the cap", 100, 60 * mib, 6 * mib, 900},
		{"live a quarter", 100, 64 * mib, 16 * mib, 300},
		{"live a third, rounded down", 100, 64 * mib, 24 * mib, 166},
		{"live half: GOGC=100's own goal", 100, 64 * mib, 32 * mib, 100},
		{"live 60%: under base", 100, 64 * mib, 40 * mib, 100},
		{"live at the floor", 100, 64 * mib, 64 * mib, 100},
		{"live over the floor", 100, 64 * mib, 200 * mib, 100},
		{"a low GOGC is raised too", 50, 64 * mib, 40 * mib, 60},
		{"a GOGC over the cap is kept", 2000, 64 * mib, 1 * mib, 2000},
		{"a GOGC over the floor's percent is kept", 400, 64 * mib, 16 * mib, 400},
		{"1 TiB floor, 1-byte heap: no overflow", 100, 1 << 40, 1, heapFloorMaxPercent},
	}
	for _, tt := range tests {
		if got := heapFloorPercent(tt.base, tt.floor, tt.live); got != tt.want {
			t.Errorf("%s: heapFloorPercent(%d, %d, %d) = %d, want %d", tt.name, tt.base, tt.floor, tt.live, got, tt.want)
		}
	}
}

// withGCPercent sets the GC percent for one test and puts it back after.
func withGCPercent(t *testing.T, p int) {
	old := debug.SetGCPercent(p)
	t.Cleanup(func() { debug.SetGCPercent(old) })
}

// ballast is heap the runtime test keeps live.
var ballast []byte

// afterCollection runs collections until hf has followed one that is
// still the last (a sentinel armed while a collection marks survives it,
// and a cleanup may come late), then returns its stats and the live heap
// that collection found. The deadline is a hang guard only.
func afterCollection(t *testing.T, hf *HeapFloor) (HeapFloorStats, uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		live, gc := readLiveHeap()
		for retry := time.Now().Add(100 * time.Millisecond); hf.Stats().LastGC < gc && time.Now().Before(retry); {
			time.Sleep(time.Millisecond)
		}
		st := hf.Stats()
		if live2, gc2 := readLiveHeap(); st.LastGC == gc && gc2 == gc && live2 == live {
			return st, live
		}
	}
	t.Fatal("the heap floor followed no collection in 20s")
	return HeapFloorStats{}, 0
}

// TestHeapFloorFollowsTheLiveHeap: with the real runtime and a floor of
// 64 MiB, the GC percent goes up while the live heap is small (16 MiB
// kept: about 300; nothing kept: up to the cap) and the next goal is
// about the floor; it is back at base once the live heap exceeds the
// floor, and after Shutdown.
func TestHeapFloorFollowsTheLiveHeap(t *testing.T) {
	const floor = 64 << 20
	withGCPercent(t, 100)
	t.Cleanup(func() { ballast = nil })
	ballast = make([]byte, 16<<20)
	runtime.GC()
	hf := NewHeapFloor(floor, slog.New(slog.DiscardHandler))
	if err := hf.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hf.Shutdown(context.Background()) })

	steps := []struct {
		name   string
		keep   int // bytes kept live
		raised bool
	}{
		{"16 MiB live", 16 << 20, true},
		{"nothing kept", 0, true},
		{"80 MiB live, over the floor", 80 << 20, false},
		{"16 MiB live again", 16 << 20, true},
	}
	for _, s := range steps {
		ballast = make([]byte, s.keep)
		st, live := afterCollection(t, hf)
		want := heapFloorPercent(100, floor, live)
		if st.Percent != want || readGCPercent() != want {
			t.Fatalf("%s (live %d): percent %d (runtime %d), want %d", s.name, live, st.Percent, readGCPercent(), want)
		}
		if raised := want > 100; raised != s.raised {
			t.Fatalf("%s (live %d): raised %v, want %v", s.name, live, raised, s.raised)
		}
		if goal := readHeapGoal(); s.raised && want < heapFloorMaxPercent && !(goal >= floor*99/100 && goal < floor*3/2) {
			t.Fatalf("%s (live %d, percent %d): goal %d, want about the floor %d", s.name, live, want, goal, floor)
		}
	}
	if st := hf.Stats(); st.Base != 100 || st.Changes < 3 {
		t.Fatalf("stats %+v: want base 100 and at least 3 changes", st)
	}
	if err := hf.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := readGCPercent(); p != 100 {
		t.Fatalf("GC percent %d after Shutdown, want the base 100", p)
	}
	after := hf.Stats()
	runtime.GC()
	runtime.GC()
	if p := readGCPercent(); p != 100 || hf.Stats() != after {
		t.Fatalf("after Shutdown: GC percent %d, stats %+v → %+v", p, after, hf.Stats())
	}
}

func readHeapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestHeapFloorLeavesBase: a floor of 0 and a floor under GOGC=off change
// nothing (the latter says so once); one floor runs at a time; the base
// is the percent in force at Start (a user's GOGC).
func TestHeapFloorLeavesBase(t *testing.T) {
	ctx := context.Background()
	withGCPercent(t, -1)
	var logged bytes.Buffer
	hf := NewHeapFloor(64<<20, slog.New(slog.NewTextHandler(&logged, nil)))
	if err := hf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	if p := readGCPercent(); p != -1 {
		t.Fatalf("GOGC=off: percent %d", p)
	}
	if n := strings.Count(logged.String(), "GOGC=off"); n != 1 {
		t.Fatalf("GOGC=off logged %d times: %q", n, logged.String())
	}
	_ = hf.Shutdown(ctx)

	debug.SetGCPercent(150) // GOGC=150
	zero := NewHeapFloor(0, slog.New(slog.DiscardHandler))
	if err := zero.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if p := readGCPercent(); p != 150 {
		t.Fatalf("zero floor: percent %d", p)
	}
	_ = zero.Shutdown(ctx)

	first := NewHeapFloor(1<<40, slog.New(slog.DiscardHandler)) // far over any live heap: the cap
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if p := readGCPercent(); p != heapFloorMaxPercent || first.Stats().Base != 150 {
		t.Fatalf("percent %d, base %d: want the cap over the user's 150", p, first.Stats().Base)
	}
	if err := first.Start(ctx); err == nil {
		t.Fatal("a floor started twice")
	}
	second := NewHeapFloor(64<<20, slog.New(slog.DiscardHandler))
	if err := second.Start(ctx); !errors.Is(err, ErrHeapFloorRunning) {
		t.Fatalf("second floor: %v, want ErrHeapFloorRunning", err)
	}
	_ = second.Shutdown(ctx) // not running: changes nothing
	if p := readGCPercent(); p != heapFloorMaxPercent {
		t.Fatalf("the second floor's Shutdown moved the percent to %d", p)
	}
	_ = first.Shutdown(ctx)
	if p := readGCPercent(); p != 150 {
		t.Fatalf("percent %d after Shutdown, want the user's 150", p)
	}
	if err := second.Start(ctx); err != nil {
		t.Fatalf("a floor after the first stopped: %v", err)
	}
	_ = second.Shutdown(ctx)
}

// TestHeapFloorAdoptsTheProgramsPercent: a debug.SetGCPercent of the
// program's while a floor runs becomes the floor's base at the next
// collection (the floor keeps raising the percent over it while the heap
// is small), and Shutdown puts that one back, not the percent in force at
// Start.
func TestHeapFloorAdoptsTheProgramsPercent(t *testing.T) {
	ctx := context.Background()
	withGCPercent(t, 100)
	hf := NewHeapFloor(1<<40, slog.New(slog.DiscardHandler)) // far over any live heap: the cap
	if err := hf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hf.Shutdown(ctx) })
	if st := hf.Stats(); st.Base != 100 || st.Percent != heapFloorMaxPercent {
		t.Fatalf("at start: %+v, want base 100 and the cap", st)
	}
	debug.SetGCPercent(2000) // the program's own, over the cap
	if st, _ := afterCollection(t, hf); st.Base != 2000 || st.Percent != 2000 {
		t.Fatalf("after the program's SetGCPercent(2000): %+v, want base and percent 2000", st)
	}
	_ = hf.Shutdown(ctx)
	if p := readGCPercent(); p != 2000 {
		t.Fatalf("percent %d after Shutdown, want the program's 2000", p)
	}
}
