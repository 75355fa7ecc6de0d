package stage_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sandstorm-go/sandstorm/"

// parseDir parses the non-test Go files of a package directory.
func parseDir(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return fset, files
}

// The runtime does not know its upper layers (DESIGN §2): stage imports
// none of the packages built on it; they register with it instead.
func TestStageImportsNoUpperLayer(t *testing.T) {
	upper := []string{"aio", "http", "profiler", "remote", "apps", "nethttp", "otelstage", "cmd", "configs", "examples"}
	fset, files := parseDir(t, ".")
	for _, f := range files {
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			rest, ok := strings.CutPrefix(path, module)
			if !ok {
				continue
			}
			top, _, _ := strings.Cut(rest, "/")
			for _, u := range upper {
				if top == u {
					t.Errorf("%s: stage imports %s", fset.Position(imp.Pos()), path)
				}
			}
		}
	}
}

// No exported signature, field or type of the framework's packages
// mentions a type of the YAML library: configuration blocks reach them
// through stage.Decoder (DESIGN §2).
func TestNoYAMLTypeInExportedAPI(t *testing.T) {
	for _, pkg := range []string{"stage", "sink", "enqueuepred", "threadpool", "batching", "aio", "http", "profiler", "remote", "nethttp", "otelstage"} {
		fset, files := parseDir(t, filepath.Join("..", pkg))
		for _, f := range files {
			yamlName := ""
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(path, "gopkg.in/yaml.") {
					yamlName = "yaml"
					if imp.Name != nil {
						yamlName = imp.Name.Name
					}
				}
			}
			if yamlName == "" {
				continue
			}
			for _, at := range exportedYAML(f, yamlName) {
				t.Errorf("%s: %s.%s mentions a yaml type in the exported API", fset.Position(at.pos), pkg, at.name)
			}
		}
	}
}

type mention struct {
	pos  token.Pos
	name string
}

// exportedYAML returns the exported declarations of f whose types use the
// package imported as yamlName.
func exportedYAML(f *ast.File, yamlName string) []mention {
	var out []mention
	uses := func(n ast.Node) bool {
		found := false
		ast.Inspect(n, func(n ast.Node) bool {
			if s, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := s.X.(*ast.Ident); ok && id.Name == yamlName {
					found = true
				}
			}
			return !found
		})
		return found
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if idx, ok := recv.(*ast.IndexExpr); ok {
					recv = idx.X
				}
				id, ok := recv.(*ast.Ident)
				if !ok || !id.IsExported() {
					continue // a method of an unexported type
				}
				name = id.Name + "." + name
			}
			if uses(d.Type) {
				out = append(out, mention{d.Pos(), name})
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					out = append(out, exportedTypeYAML(s.Name.Name, s.Type, uses)...)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Type != nil && uses(s.Type) {
							out = append(out, mention{n.Pos(), n.Name})
						}
					}
				}
			}
		}
	}
	return out
}

// exportedTypeYAML checks the exported part of a type declaration: the
// exported fields of a struct, the methods of an interface, or the whole
// type otherwise.
func exportedTypeYAML(name string, typ ast.Expr, uses func(ast.Node) bool) []mention {
	var out []mention
	switch t := typ.(type) {
	case *ast.StructType:
		for _, fld := range t.Fields.List {
			exported := len(fld.Names) == 0 // embedded: its type is in the API
			for _, n := range fld.Names {
				exported = exported || n.IsExported()
			}
			if exported && uses(fld.Type) {
				out = append(out, mention{fld.Pos(), name + " field"})
			}
		}
	case *ast.InterfaceType:
		if uses(t) {
			out = append(out, mention{t.Pos(), name})
		}
	default:
		if uses(t) {
			out = append(out, mention{t.Pos(), name})
		}
	}
	return out
}

// The check itself finds what it must.
func TestExportedYAMLDetects(t *testing.T) {
	src := `package p
import y "gopkg.in/yaml.v3"
type A struct{ N y.Node; n y.Node }
type B interface{ Decode(*y.Node) error }
type c struct{ N y.Node }
func F(n *y.Node) {}
func (c) G(n *y.Node) {}
func (*A) H() y.Kind { return 0 }
func f(n *y.Node) {}
var V y.Node
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range exportedYAML(f, "y") {
		got = append(got, m.name)
	}
	if want := "A field,B,F,A.H,V"; strings.Join(got, ",") != want {
		t.Fatalf("found %v, want %s", got, want)
	}
	if _, err := os.Stat(filepath.Join("..", "go.mod")); err != nil {
		t.Fatalf("the layering tests run from the stage directory of the module: %v", err)
	}
}
