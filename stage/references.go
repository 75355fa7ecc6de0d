package stage

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/sink"
)

// StageArgs declares which of a handler's args name other stages, so that
// Load checks them with the rest of the file, before any stage starts: a
// mistyped stage name is an error naming the file, line and key, with a
// "did you mean". Each key is a dotted path into the args; a "*" segment
// stands for every value of a mapping or every item of a list:
//
//	reg.Register("shop.Front", newFront)
//	reg.StageArgs("shop.Front", "next", "routes.*")
//
// An empty value names no stage and is not checked.
func (r *Registry) StageArgs(handler string, keys ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stageArgs == nil {
		r.stageArgs = map[string][]string{}
	}
	r.stageArgs[handler] = append(r.stageArgs[handler], keys...)
}

func (r *Registry) stageArgKeys(handler string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.stageArgs[handler]
}

// locatedError is a configuration error at a line that also wraps a
// sentinel (ErrUnknownHandler, ErrNoStage).
type locatedError struct {
	ye   *yamlstrict.Error
	kind error
}

func (e *locatedError) Error() string        { return e.ye.Error() }
func (e *locatedError) Unwrap() error        { return e.ye }
func (e *locatedError) Is(target error) bool { return target == e.kind }

// checkLoad reports, all at once and in file order, with parseErr (the
// errors ParseConfig found), every error that needs the registry: stages
// whose handler is not registered, stage names in args (as declared with
// Registry.StageArgs) that name no stage of the file, args that do not
// decode into the args type the handler declares (Registry.DeclareArgs, or
// an Args field), and predicate blocks that do not build. It checks the
// stages ParseConfig rejected as well as the others.
func checkLoad(cfg *Config, r *Registry, parseErr error) error {
	stages := append(slices.Clone(cfg.Stages), cfg.rejected...)
	names := make([]string, len(stages))
	for i, ns := range stages {
		names[i] = ns.Name
	}
	errs := []error{parseErr}
	for _, ns := range stages {
		sc := &ns.Config
		f, ok := r.Lookup(sc.Handler)
		if !ok {
			msg := fmt.Sprintf("unknown handler %q (forgotten import?)", sc.Handler)
			if s := yamlstrict.Suggest(sc.Handler, r.Names()); s != "" {
				msg = fmt.Sprintf("unknown handler %q (did you mean %q? or a forgotten import)", sc.Handler, s)
			}
			errs = append(errs, &locatedError{
				ye:   &yamlstrict.Error{Line: sc.handlerLine, Path: yamlstrict.Join(sc.path, "handler"), Msg: msg},
				kind: ErrUnknownHandler,
			})
			continue
		}
		for _, key := range r.stageArgKeys(sc.Handler) {
			walkArgs(nodeOf(sc.Args), sc.path+".args", strings.Split(key, "."), func(n *yaml.Node, path string) {
				if n.Kind != yaml.ScalarNode || n.Value == "" || slices.Contains(names, n.Value) {
					return
				}
				errs = append(errs, noStageError(n, path, n.Value, names))
			})
		}
		if v := r.newArgs(sc.Handler, f); v != nil && present(sc.Args) {
			errs = append(errs, unlocate(sc.Args.Decode(v))...)
		}
	}
	errs = append(errs, checkPredicates(stages, names)...)
	if err := inFileOrder(errs); err != nil {
		return &ConfigError{File: cfg.File, Err: err}
	}
	return nil
}

// checkPredicates builds every stage's predicate block, on state of its
// own (no manager's), and returns their errors: each block's, located.
func checkPredicates(stages []NamedStageConfig, names []string) []error {
	shared := enqueuepred.NewShared()
	env := func(stage string) enqueuepred.Env {
		return enqueuepred.Env{Stage: stage, Shared: shared, Lookup: func(name string) (sink.Sink, bool) {
			if !slices.Contains(names, name) {
				return nil, false
			}
			return sink.NewQueue(0), true
		}}
	}
	var errs []error
	bad := map[string]bool{}
	for _, ns := range stages {
		if ns.Config.Predicate != nil || !present(ns.Config.PredicateSpec) {
			continue
		}
		if err := enqueuepred.DeclareGroups(ns.Config.PredicateSpec, env(ns.Name)); err != nil {
			errs, bad[ns.Name] = append(errs, unlocate(err)...), true
		}
	}
	for _, ns := range stages {
		if ns.Config.Predicate != nil || !present(ns.Config.PredicateSpec) || bad[ns.Name] {
			continue
		}
		if _, err := enqueuepred.FromSpec(ns.Config.PredicateSpec, env(ns.Name)); err != nil {
			errs = append(errs, unlocate(err)...)
		}
	}
	return errs
}

// unlocate returns the located errors a *ConfigError holds (the file is
// the caller's to name), or err itself.
func unlocate(err error) []error {
	if err == nil {
		return nil
	}
	if ce, ok := err.(*ConfigError); ok {
		return yamlstrict.Split(ce.Err)
	}
	return yamlstrict.Split(err)
}

// noStageError says that name, at node n, names no stage.
func noStageError(n *yaml.Node, path, name string, stages []string) error {
	msg := fmt.Sprintf("no stage %q", name)
	if s := yamlstrict.Suggest(name, stages); s != "" {
		msg = fmt.Sprintf("no stage %q (did you mean %q?)", name, s)
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	return &locatedError{ye: &yamlstrict.Error{Line: line, Path: path, Msg: msg}, kind: ErrNoStage}
}

// walkArgs calls f for every node at the key path keys below n.
func walkArgs(n *yaml.Node, path string, keys []string, f func(*yaml.Node, string)) {
	if n == nil || n.Kind == 0 {
		return
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if len(keys) == 0 {
		f(n, path)
		return
	}
	key, rest := keys[0], keys[1:]
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; key == "*" || k == key {
				walkArgs(n.Content[i+1], yamlstrict.Join(path, k), rest, f)
			}
		}
	case yaml.SequenceNode:
		if key == "*" {
			for i, c := range n.Content {
				walkArgs(c, fmt.Sprintf("%s[%d]", path, i), rest, f)
			}
		}
	}
}

// ArgError locates err at the stage's args key path keys (the deepest of
// them the file has; the args block itself if none) for a check made in
// Init: the error names the file, the line and the key, like the loader's
// own errors, and wraps err.
//
//	if a.MaxConnections < 0 {
//		return c.ArgError(fmt.Errorf("must not be negative, got %d", a.MaxConnections), "maxConnections")
//	}
func (c *Context) ArgError(err error, keys ...string) error {
	n, path := nodeOf(c.args), c.path
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	found := true
	for _, k := range keys {
		path = yamlstrict.Join(path, k)
		if !found {
			continue
		}
		if next := lookup(n, k); next != nil {
			n = next
		} else {
			found = false // the line of the deepest block the file has
		}
	}
	line := 0
	if n != nil && n.Kind != 0 {
		line = n.Line
	}
	return &ConfigError{File: c.file, Err: &argError{ye: &yamlstrict.Error{Line: line, Path: path, Msg: err.Error()}, err: err}}
}

// argError is an error from a handler's Init located in its args.
type argError struct {
	ye  *yamlstrict.Error
	err error
}

func (e *argError) Error() string   { return e.ye.Error() }
func (e *argError) Unwrap() []error { return []error{e.ye, e.err} }

// sinkError locates a failed Context.Sink lookup at the args value that
// names the stage, if the args hold it, with a "did you mean".
func (c *Context) sinkError(name string, err error) error {
	if !errors.Is(err, ErrNoStage) {
		return err
	}
	var at *yaml.Node
	var atPath string
	walkArgs(nodeOf(c.args), c.path, nil, func(root *yaml.Node, _ string) {
		var find func(n *yaml.Node, path string)
		find = func(n *yaml.Node, path string) {
			if at != nil {
				return
			}
			switch n.Kind {
			case yaml.ScalarNode:
				if n.Value == name {
					at, atPath = n, path
				}
			case yaml.MappingNode:
				for i := 0; i+1 < len(n.Content); i += 2 {
					find(n.Content[i+1], yamlstrict.Join(path, n.Content[i].Value))
				}
			case yaml.SequenceNode:
				for i, x := range n.Content {
					find(x, fmt.Sprintf("%s[%d]", path, i))
				}
			}
		}
		find(root, c.path)
	})
	if at == nil {
		return err
	}
	var stages []string
	for _, s := range c.mgr.Stages() {
		stages = append(stages, s.Name())
	}
	return &ConfigError{File: c.file, Err: noStageError(at, atPath, name, stages)}
}
