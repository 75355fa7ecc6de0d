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
	var memo stackMemo
	var stacks []string
	for range 2 { // the second from the memo
		err := invoke(HandlerFunc(poisonHandler), []sink.Event{1}, &memo)
		var pe *PanicError
		if !errors.As(err, &pe) {
			t.Fatalf("err %v", err)
		}
		stacks = append(stacks, string(pe.Stack))
	}
	if stacks[0] != stacks[1] {
		t.Fatalf("the memo changed the stack:\n%s\n%s", stacks[0], stacks[1])
	}
	st := stacks[0]
	t.Logf("%s", st)
	for _, want := range []string{"runtime.gopanic()", "stage.poisonHandler()", "panicstack_internal_test.go:", "stage.invoke()"} {
		if !strings.Contains(st, want) {
			t.Fatalf("stack lacks %q:\n%s", want, st)
		}
	}
}
