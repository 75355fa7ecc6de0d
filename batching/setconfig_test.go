package batching_test

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/batching"
)

// TestSetConfig: new bounds move the factor into them and restart the
// search from the new Max; other settings keep the factor; an invalid
// configuration changes nothing; Enabled is not the caller's to change.
func TestSetConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     batching.Config
		size    int
		invalid bool
	}{
		{"bounds lowered", batching.Config{Min: 1, Max: 8}, 8, false},
		{"bounds raised", batching.Config{Min: 10, Max: 200}, 200, false},
		{"other settings only", batching.Config{Min: 1, Max: 100, Keep: 0.8, Window: 5}, 30, false},
		{"invalid", batching.Config{Min: 9, Max: 3}, 30, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := batching.New(batching.Config{Enabled: true, Min: 1, Max: 100})
			// Drive the factor down from 100 to 30-odd with steady
			// throughput, then pin the expectation to where it is.
			now := time.Unix(0, 0)
			processed := uint64(0)
			for c.BatchSize() > 30 {
				now = now.Add(time.Second)
				processed += 1000
				c.Observe(now, processed)
			}
			if tc.name == "other settings only" || tc.invalid {
				tc.size = c.BatchSize()
			}
			err := c.SetConfig(tc.cfg)
			if (err != nil) != tc.invalid {
				t.Fatalf("SetConfig: %v", err)
			}
			if got := c.BatchSize(); got != tc.size {
				t.Errorf("batch size %d, want %d", got, tc.size)
			}
			if !c.Config().Enabled {
				t.Error("SetConfig turned the controller off")
			}
			if c.Resets() != 0 {
				t.Errorf("SetConfig counted as %d workload resets", c.Resets())
			}
		})
	}
}
