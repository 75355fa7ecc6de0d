package remote_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestSecurityConfigErrors: a bad maxDeliver, a token file that cannot be
// read or is empty, half a tls block are errors of the load naming the
// file, the line and the key.
func TestSecurityConfigErrors(t *testing.T) {
	empty := writeFile(t, "empty", "\n")
	missing := filepath.Join(t.TempDir(), "absent")
	p := newPKI(t)
	for _, tt := range []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"negative maxDeliver", `
stages:
  W:
    handler: t.W
    remote: {mode: durable, maxDeliver: -1}
`, 5, "stages.W.remote.maxDeliver: maxDeliver -1 is negative"},
		{"missing token file", fmt.Sprintf(`
global:
  cluster:
    node: a
    tokenFile: %s
`, missing), 5, fmt.Sprintf("global.cluster.tokenFile: token file %q:", missing)},
		{"empty token file", fmt.Sprintf(`
global:
  cluster:
    tokenFile: %s
`, empty), 4, fmt.Sprintf("global.cluster.tokenFile: token file %q is empty", empty)},
		{"cert without key", fmt.Sprintf(`
global:
  cluster:
    node: a
    tls:
      cert: %s
      ca: %s
`, p.cert, p.ca), 6, "global.cluster.tls: cert"},
		{"key without cert", fmt.Sprintf(`
global:
  cluster:
    tls: {key: %s}
`, p.key), 4, "global.cluster.tls: key"},
		{"missing ca", fmt.Sprintf(`
global:
  cluster:
    tls:
      cert: %s
      key: %s
      ca: %s
`, p.cert, p.key, missing), 7, "global.cluster.tls.ca:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := stage.ParseConfig([]byte(tt.yaml), "c.yaml")
			want := fmt.Sprintf("c.yaml: line %d: %s", tt.line, tt.want)
			if !errors.Is(err, stage.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v\nwant %q", err, want)
			}
		})
	}
	// The good blocks load, and keep only the file names.
	tok := writeFile(t, "tok", "secret-in-file\n")
	cfg, err := stage.ParseConfig([]byte(fmt.Sprintf(`
global:
  cluster:
    tokenFile: %s
    tls: {cert: %s, key: %s, ca: %s}
stages:
  W:
    handler: t.W
    remote: {mode: durable}
`, tok, p.cert, p.key, p.ca)), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cc, _, _ := remote.ClusterFrom(cfg)
	if cc.TokenFile != tok || cc.TLS != p.block() || strings.Contains(fmt.Sprintf("%+v", cc), "secret-in-file") {
		t.Fatalf("cluster block %+v", cc)
	}
	sc := cfg.Stages[0].Config
	if got := remote.StageConfigOf(&sc).MaxDeliver; got != 5 {
		t.Fatalf("default maxDeliver %d, want 5", got)
	}
}

func TestIdempotentKey(t *testing.T) {
	for _, tt := range []struct {
		block string
		want  bool
	}{
		{"{mode: request, idempotent: true}", true},
		{"{mode: request}", false},
	} {
		cfg, err := stage.ParseConfig([]byte("stages:\n  W:\n    handler: t.W\n    remote: "+tt.block+"\n"), "c.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if got := remote.StageConfigOf(&cfg.Stages[0].Config).Idempotent; got != tt.want {
			t.Errorf("%s: Idempotent = %v, want %v", tt.block, got, tt.want)
		}
	}
}
