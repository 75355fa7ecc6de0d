package configs_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	// Linking aio and profiler registers their global sections with stage.
	_ "github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/configs"
	_ "github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

// A mistake in haboob.yaml's profiler or aio block fails stage.Parse and
// stage.ParseConfig themselves, with the line and key, rather than later
// when profiler.ConfigFrom or aio.ConfigOf decode the block.
func TestHaboobSectionErrors(t *testing.T) {
	tests := []struct {
		name, old, new string
		want           string // the error after "line N: "
	}{
		{"profiler unknown key", "    interval: 1s\n", "    interval: 1s\n    bogus: 1\n",
			"global.profiler.bogus: unknown key"},
		{"profiler bad bool", "    enabled: false ", "    enabled: maybe ",
			`global.profiler.enabled: want a bool value, got "maybe"`},
		{"profiler bad duration", "    interval: 1s\n", "    interval: often\n",
			`global.profiler.interval: bad duration "often"`},
		{"aio unknown key", "    eventLoops: 2\n", "    eventLoop: 2\n",
			"global.aio.eventLoop: unknown key"},
		{"aio decimal", "    eventLoops: 2\n", "    eventLoops: 2.5\n",
			`global.aio.eventLoops: want a whole number, got "2.5"`},
		{"aio bad size", "    readBuffer: 16KiB\n", "    readBuffer: lots\n",
			`global.aio.readBuffer: aio: invalid configuration: bad byte size "lots"`},
		{"aio socket key", `      http: {addr: "127.0.0.1:8080"}`, `      http: {addr: "127.0.0.1:8080", bogus: 1}`,
			"global.aio.sockets.http.bogus: unknown key"},
	}
	src := string(configs.Haboob)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := strings.Index(src, tt.old)
			if i < 0 || strings.Count(src, tt.old) != 1 {
				t.Fatalf("haboob.yaml has not exactly one %q", tt.old)
			}
			doc := src[:i] + tt.new + src[i+len(tt.old):]
			// the changed line is the last line of tt.new
			line := strings.Count(src[:i]+strings.TrimSuffix(tt.new, "\n"), "\n") + 1
			want := fmt.Sprintf("line %d: %s", line, tt.want)

			_, err := stage.Parse([]byte(doc), stage.NewRegistry())
			if err == nil || !strings.HasPrefix(err.Error(), "config: "+want) {
				t.Fatalf("Parse: %v\nwant an error starting with config: %s", err, want)
			}
			if !errors.Is(err, stage.ErrInvalidConfig) {
				t.Fatalf("%v does not wrap stage.ErrInvalidConfig", err)
			}
			_, err = stage.ParseConfig([]byte(doc), configs.HaboobFile)
			if err == nil || !strings.HasPrefix(err.Error(), configs.HaboobFile+": "+want) {
				t.Fatalf("ParseConfig: %v\nwant an error starting with %s: %s", err, configs.HaboobFile, want)
			}
		})
	}
}
