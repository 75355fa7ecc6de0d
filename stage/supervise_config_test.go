package stage_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/stage"
)

// TestBackoffConfig: `backoff` in a stage's supervisor block and in a
// supervisor group: absent means the default, `off` and an explicit zero
// turn backoff off (NoBackoff), a duration is kept; a negative duration
// or a bad value is an error naming the file, the line and the key.
func TestBackoffConfig(t *testing.T) {
	for _, tc := range []struct {
		value   string // "" for absent
		want    time.Duration
		wantErr string
	}{
		{"", 0, ""},
		{"off", stage.NoBackoff, ""},
		{"0", stage.NoBackoff, ""},
		{"0s", stage.NoBackoff, ""},
		{"20ms", 20 * time.Millisecond, ""},
		{"-5ms", 0, `f.yaml: line 6: stages.A.supervisor.backoff: negative duration -5ms (write off to turn backoff off)`},
		{"fast", 0, `f.yaml: line 6: stages.A.supervisor.backoff: bad duration "fast"`},
	} {
		t.Run(tc.value, func(t *testing.T) {
			kv := ""
			if tc.value != "" {
				kv = "\n      backoff: " + tc.value
			}
			doc := "stages:\n  A:\n    handler: x\n    supervisor:\n      maxRestarts: 5" + kv + "\n" +
				"  B: {handler: x}\n" +
				"supervisors:\n  G:\n    children: [B]" + strings.ReplaceAll(kv, "\n      ", "\n    ") + "\n"
			cfg, err := stage.ParseConfig([]byte(doc), "f.yaml")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v; want %q", err, tc.wantErr)
				}
				// The group's backoff, on line 11, is reported too.
				if !strings.Contains(err.Error(), "line 11: supervisors.G.backoff") {
					t.Fatalf("error %v does not report the group's backoff", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Stages[0].Config.Supervisor.Backoff; got != tc.want {
				t.Fatalf("stage backoff %v, want %v", got, tc.want)
			}
			if got := cfg.Supervisors[0].Config.Backoff; got != tc.want {
				t.Fatalf("group backoff %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBackoffOffInGo: in Go, a negative Backoff (NoBackoff) is off and
// valid; zero is the default.
func TestBackoffOffInGo(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	noop := func() stage.Handler { return stage.HandlerFunc(nil) }
	for _, b := range []time.Duration{0, stage.NoBackoff, -time.Second, 5 * time.Millisecond} {
		name := "S" + b.String()
		if _, err := m.CreateSupervised(name, noop, stage.StageConfig{Supervisor: &stage.SupervisorConfig{Backoff: b}}); err != nil {
			t.Fatalf("backoff %v: %v", b, err)
		}
	}
}
