package gnutella

import (
	"testing"
	"time"
)

func tid(i int) ID {
	var id ID
	id[0], id[1], id[2] = byte(i), byte(i>>8), byte(i>>16)
	return id
}

// The routing table never holds more than its size, forgets entries older
// than its age, and keeps every entry at least age/2 unless size forces it
// out. The clock is the argument.
func TestRouteTableBounds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name string
		size int
		age  time.Duration
		adds int
		step time.Duration
	}{
		{"size bound", 100, time.Hour, 10000, 0},
		{"age bound", 1 << 20, time.Minute, 10000, 100 * time.Millisecond},
		{"both", 64, 10 * time.Second, 5000, 7 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newRouteTable(tt.size, tt.age)
			now := t0
			added := map[ID]time.Time{}
			for i := 0; i < tt.adds; i++ {
				now = now.Add(tt.step)
				if !tb.add(tid(i), route{}, now) {
					t.Fatalf("fresh id %d reported as a duplicate", i)
				}
				added[tid(i)] = now
				if tb.len() > tt.size {
					t.Fatalf("%d entries, size %d", tb.len(), tt.size)
				}
				if tb.add(tid(i), route{}, now) {
					t.Fatalf("id %d added twice", i)
				}
			}
			for id, at := range added {
				_, ok := tb.get(id, now)
				if ok && now.Sub(at) >= tt.age {
					t.Fatalf("entry %v old %v kept (age %v)", id, now.Sub(at), tt.age)
				}
			}
			// The newest entry is always there.
			if _, ok := tb.get(tid(tt.adds-1), now); !ok {
				t.Fatal("newest entry lost")
			}
		})
	}
}

func TestRouteTableKeepsHalfAge(t *testing.T) {
	tb := newRouteTable(1000, time.Minute)
	t0 := time.Unix(0, 0)
	tb.add(tid(1), route{}, t0)
	for d := time.Duration(0); d < 30*time.Second; d += time.Second {
		if _, ok := tb.get(tid(1), t0.Add(d)); !ok {
			t.Fatalf("entry gone after %v", d)
		}
	}
	if _, ok := tb.get(tid(1), t0.Add(2*time.Minute)); ok {
		t.Fatal("entry kept for two ages")
	}
}
