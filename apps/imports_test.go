// Package apps_test checks the layering of the applications under apps/:
// each is a library on the framework, and none reaches into another for
// general code (such code belongs in the framework, DESIGN §2).
package apps_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const appsPath = "github.com/sandstorm-go/sandstorm/apps/"

// allowed lists the imports of one app by another that are the design,
// not general code in the wrong place, with the reason.
var allowed = map[[2]string]string{
	// Arashi is a set of dynamic page stages on Haboob's web server
	// (HttpRecv, PageCache, HttpSend and its static files), as in the
	// thesis (§6.4). Its service-degradation controller used to come from
	// haboob too; it is enqueuepred.Degrader now.
	{"arashi", "haboob"}: "Arashi runs on Haboob's HTTP stages",
}

// appImports returns, for each app (a folder under apps/), the other apps
// its Go files (tests included) import, with the first file that does.
func appImports(t *testing.T) map[[2]string]string {
	t.Helper()
	edges := map[[2]string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		app, _, nested := strings.Cut(filepath.ToSlash(path), "/")
		if !nested {
			return nil // this file
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			rest, ok := strings.CutPrefix(p, appsPath)
			if !ok {
				continue
			}
			other, _, _ := strings.Cut(rest, "/")
			if e := [2]string{app, other}; other != app && edges[e] == "" {
				edges[e] = path
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return edges
}

func TestNoAppImportsAnother(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var apps []string
	for _, e := range entries {
		if e.IsDir() {
			apps = append(apps, e.Name())
		}
	}
	for _, want := range []string{"arashi", "gnutella", "haboob"} {
		if !slices.Contains(apps, want) {
			t.Fatalf("apps/%s missing (found %v): is the test running in apps/?", want, apps)
		}
	}
	edges := appImports(t)
	for e, file := range edges {
		if _, ok := allowed[e]; !ok {
			t.Errorf("apps/%s imports apps/%s (%s): move what they share into the framework", e[0], e[1], file)
		}
	}
	for e, why := range allowed {
		if edges[e] == "" {
			t.Errorf("apps/%s no longer imports apps/%s: drop it from the allowed list (%s)", e[0], e[1], why)
		}
	}
}
