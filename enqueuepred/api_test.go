package enqueuepred

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxExported bounds the package's top-level exported names (issue 23):
// the concrete predicate types stay unexported behind constructors
// returning sink.Predicate, so that a user meets the YAML types and a few
// constructors first. Raise it only for a name a Go user needs.
const maxExported = 60

// exportedNames returns the exported top-level names (types, funcs
// without a receiver, vars, consts) of the non-test Go files in dir,
// sorted.
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, "func "+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, "type "+s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, d.Tok.String()+" "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

func TestExportedNamesBounded(t *testing.T) {
	names := exportedNames(t, ".")
	if len(names) < 10 {
		t.Fatalf("only %d exported names found: is the test parsing the package?", len(names))
	}
	if len(names) > maxExported {
		t.Errorf("package enqueuepred exports %d top-level names, at most %d allowed:\n\t%s",
			len(names), maxExported, strings.Join(names, "\n\t"))
	}
}
