package stage_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/stage"
	"github.com/sandstorm-go/sandstorm/threadpool"
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

// TestStageConfigDocStatesDefaults: StageConfig's doc comment states the
// defaults its zero value gets: the thread pool's bounds (threadpool's
// DefaultMin..DefaultMax) with its controller on, and batches of up to
// 1000, not a single goroutine.
func TestStageConfigDocStatesDefaults(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE && g.Specs[0].(*ast.TypeSpec).Name.Name == "StageConfig" {
			doc = g.Doc.Text()
		}
	}
	if doc == "" {
		t.Fatal("StageConfig has no doc comment")
	}
	for _, want := range []string{
		fmt.Sprintf("%d to %d goroutines", threadpool.DefaultMin, threadpool.DefaultMax),
		"controller",
		"batches of up to 1000",
	} {
		if !strings.Contains(strings.Join(strings.Fields(doc), " "), want) {
			t.Errorf("StageConfig doc does not say %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "one goroutine") {
		t.Errorf("StageConfig doc still says one goroutine:\n%s", doc)
	}
}
