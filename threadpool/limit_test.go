package threadpool

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Limit is what the pool may grow to: its initial size when no controller
// runs, the SEDA controller's limit (max until thrashing detection lowers
// it: see the enqueuepred Saturated tests), max under another sizer.
func TestPoolLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"seda", Config{Min: 1, Max: 4}, 4},
		{"seda, thrashing detection off", Config{Min: 1, Max: 4, Controller: ControllerConfig{Enabled: true}}, 4},
		{"whirlwind", Config{Min: 1, Max: 4, Controller: ControllerConfig{Type: TypeWhirlwind}}, 4},
		{"own sizer", Config{Min: 1, Max: 4, Controller: ControllerConfig{
			NewSizer: func(int, int) Sizer { return SizerFunc(func(s Sample) int { return s.Size }) }}}, 4},
		{"disabled", Config{Min: 1, Max: 4, Initial: 2, Controller: ControllerConfig{Disabled: true}}, 2},
		{"fixed", Config{Min: 3, Max: 3}, 3},
		{"single-threaded", Config{Max: 4, SingleThreaded: true}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool(newTestStage(func([]sink.Event) {}), tc.cfg)
			if got := p.Limit(); got != tc.want {
				t.Fatalf("Limit %d, want %d", got, tc.want)
			}
		})
	}
}
