package stage_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// argsHandler declares its args with an Args field.
type argsHandler struct {
	Args struct {
		Size int `yaml:"size"`
	}
}

func (*argsHandler) HandleEvents([]sink.Event) error { return nil }

// TestRegistryWrap: after Wrap every handler is the middleware's, and the
// file is still checked at load: a stage arg naming no stage, and args
// that do not decode into the unwrapped handler's Args field.
func TestRegistryWrap(t *testing.T) {
	reg := testRegistry(nil)
	reg.Register("test.Args", func() stage.Handler { return &argsHandler{} })
	var wrapped []stage.Handler
	reg.Wrap(func(h stage.Handler) stage.Handler {
		wrapped = append(wrapped, h)
		return stage.Wrap(h, nil, h.HandleEvents)
	})
	tests := []struct {
		doc, wantErr string
	}{
		{"stages:\n  A: {handler: test.Echo}\n  B: {handler: test.Args, args: {size: 3}}\n", ""},
		{"stages:\n  A: {handler: test.Echo, args: {next: Nope}}\n", "stages.A.args.next"},
		{"stages:\n  B: {handler: test.Args, args: {size: big}}\n", "stages.B.args.size"},
	}
	for _, tt := range tests {
		wrapped = nil
		m, err := stage.Parse([]byte(tt.doc), reg)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: err %v, want one at %s", tt.doc, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range m.Stages() {
			if _, ok := st.Handler().(interface{ Unwrap() stage.Handler }); !ok {
				t.Errorf("stage %s's handler %T is not the middleware's", st.Name(), st.Handler())
			}
		}
		if len(wrapped) < 2 {
			t.Errorf("middleware saw %d handlers, want 2", len(wrapped))
		}
	}
}

// Registry.Wrap puts middleware (tracing, measuring) around every handler
// a registry makes, keeping what the registry knows of their args.
func ExampleRegistry_Wrap() {
	reg := stage.NewRegistry()
	reg.Register("example.Echo", func() stage.Handler {
		return stage.HandlerFunc(func(batch []sink.Event) error { return nil })
	})
	reg.Wrap(func(h stage.Handler) stage.Handler {
		return stage.Wrap(h, nil, func(batch []sink.Event) error {
			fmt.Println("batch of", len(batch))
			return h.HandleEvents(batch)
		})
	})
	f, _ := reg.Lookup("example.Echo")
	_ = f().HandleEvents([]sink.Event{1, 2})
	// Output:
	// batch of 2
}
