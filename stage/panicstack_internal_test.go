package stage

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

func poisonHandler(b []sink.Event) error { panic("poison") }

// TestPanicStack: a handler's panic carries its stack, from the panic up
// through the handler, with files and lines.
func TestPanicStack(t *testing.T) {
	err := invoke(HandlerFunc(poisonHandler), []sink.Event{1})
	var pe *PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("err %v", err)
	}
	st := string(pe.Stack)
	t.Logf("%s", st)
	for _, want := range []string{"runtime.gopanic()", "stage.poisonHandler()", "panicstack_internal_test.go:", "stage.invoke()"} {
		if !strings.Contains(st, want) {
			t.Fatalf("stack lacks %q:\n%s", want, st)
		}
	}
}
