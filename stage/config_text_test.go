package stage_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/stage"
)

// TestSupervisorsShapeErrorListsKeys: the error for a `supervisors:`
// block that is not a mapping lists every key a supervisor block takes
// (SupervisorConfig's yaml keys), not an old subset.
func TestSupervisorsShapeErrorListsKeys(t *testing.T) {
	_, err := stage.ParseConfig([]byte("stages:\n  A: {handler: test.Echo}\nsupervisors: [A]\n"), "shape.yaml")
	if err == nil {
		t.Fatal("a list for supervisors: accepted")
	}
	typ := reflect.TypeFor[stage.SupervisorConfig]()
	for i := range typ.NumField() {
		key, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not list key %s", err, key)
		}
	}
}
