package stage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// checker is a handler whose Init checks its args the way a real one
// does: a value out of range (ArgError) and a stage it looks up by name
// (not declared with StageArgs, so only Init finds a mistake).
type checker struct {
	Args struct {
		Limit int    `yaml:"limit"`
		Next  string `yaml:"next"`
	}
}

func (c *checker) Init(ctx *stage.Context) error {
	if err := ctx.DecodeArgs(&c.Args); err != nil {
		return err
	}
	if c.Args.Limit < 0 {
		return ctx.ArgError(fmt.Errorf("must not be negative, got %d", c.Args.Limit), "limit")
	}
	if c.Args.Next != "" {
		if _, err := ctx.Sink(c.Args.Next); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) HandleEvents([]sink.Event) error { return nil }

func TestInitErrorsAreLocated(t *testing.T) {
	reg := stage.NewRegistry()
	reg.Register("t.Check", func() stage.Handler { return &checker{} })
	for _, tc := range []struct {
		args, want string
		sentinel   error
	}{
		{"{limit: -1}", "app.yaml: line 4: stages.A.args.limit: must not be negative, got -1", stage.ErrInvalidConfig},
		{"{next: Bb}", `app.yaml: line 4: stages.A.args.next: no stage "Bb" (did you mean "B"?)`, stage.ErrNoStage},
		{"{}", "", nil},
	} {
		doc := "stages:\n  A:\n    handler: t.Check\n    args: " + tc.args + "\n  B:\n    handler: t.Check\n"
		cfg, err := stage.ParseConfig([]byte(doc), "app.yaml")
		if err != nil {
			t.Fatal(err)
		}
		m, err := stage.NewFromConfig(cfg, reg, stage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		err = m.Start(context.Background())
		_ = m.Shutdown(context.Background())
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.args, err)
			}
			continue
		}
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) || !errors.Is(err, tc.sentinel) || !errors.Is(err, stage.ErrInit) {
			t.Errorf("%s: %v\nwant ...%s, wrapping %v", tc.args, err, tc.want, tc.sentinel)
		}
	}
}
