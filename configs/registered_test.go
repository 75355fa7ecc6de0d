package configs_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Every section a linked-in package registers with stage decodes its own
// block strictly: a mistake fails the load with the file, the line and
// the key, like stage's own keys.
func TestEveryRegisteredSectionLocatesErrors(t *testing.T) {
	global, stages := stage.Sections()
	for _, want := range []string{"aio", "cluster", "profiler"} {
		if !slices.Contains(global, want) {
			t.Errorf("global section %q not registered (have %v)", want, global)
		}
	}
	if !slices.Contains(stages, "remote") {
		t.Errorf("stage section remote not registered (have %v)", stages)
	}
	for _, name := range global {
		doc := fmt.Sprintf("global:\n  shutdown: 1s\n  %s:\n    bogusKey: 1\n", name)
		want := fmt.Sprintf("sections.yaml: line 4: global.%s.bogusKey: unknown key", name)
		checkLocated(t, "global."+name, doc, want)
		// a block of the wrong kind is located at the block
		doc = fmt.Sprintf("global:\n  %s: [1, 2]\n", name)
		want = fmt.Sprintf("sections.yaml: line 2: global.%s: ", name)
		checkLocated(t, "global."+name+" list", doc, want)
	}
	for _, name := range stages {
		doc := fmt.Sprintf("stages:\n  S:\n    handler: h\n    %s:\n      bogusKey: 1\n", name)
		want := fmt.Sprintf("sections.yaml: line 5: stages.S.%s.bogusKey: unknown key", name)
		checkLocated(t, "stages.S."+name, doc, want)
	}
}

func checkLocated(t *testing.T, what, doc, want string) {
	t.Helper()
	_, err := stage.ParseConfig([]byte(doc), "sections.yaml")
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("%s: error %v\nwant one starting with %s", what, err, want)
		return
	}
	if !errors.Is(err, stage.ErrInvalidConfig) {
		t.Errorf("%s: %v does not wrap stage.ErrInvalidConfig", what, err)
	}
}

// The values checks of each section are located at their key.
func TestSectionValueErrors(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"global:\n  profiler:\n    interval: -1s\n", "line 3: global.profiler.interval: negative duration -1s"},
		{"global:\n  profiler: {http: nonsense}\n", `line 2: global.profiler.http: bad listen address "nonsense"`},
		{"global:\n  aio:\n    sockets:\n      a: {eventLoops: -1}\n", "line 4: global.aio.sockets.a: eventLoops -1 is negative"},
		{"global:\n  aio:\n    readBuffer: 3 bananas\n", `line 3: global.aio.readBuffer: aio: invalid configuration: bad byte size "3 bananas"`},
		{"global:\n  cluster: {node: a.b}\n", `line 2: global.cluster: stage: invalid configuration: node name "a.b" is not a NATS subject token`},
		{"stages:\n  S:\n    handler: h\n    remote:\n      mode: sometimes\n", `line 5: stages.S.remote.mode: unknown remote mode "sometimes"`},
		{"stages:\n  S:\n    handler: h\n    remote: {timeout: -2s}\n", "line 4: stages.S.remote.timeout: negative duration -2s"},
		{"stages:\n  S:\n    handler: h\n    remote: {retries: -3}\n", "line 4: stages.S.remote.retries: retries -3 below -1"},
	} {
		checkLocated(t, tt.doc, tt.doc, "sections.yaml: "+tt.want)
	}
}

// What the sections decoded reaches their owners.
func TestSectionValuesReachOwners(t *testing.T) {
	cfg, err := stage.ParseConfig(configs.HaboobCluster, configs.HaboobClusterFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := remote.ClusterFrom(cfg); !ok || err != nil {
		t.Fatalf("cluster: %v %v", ok, err)
	}
	for _, ns := range cfg.Stages {
		rc := remote.StageConfigOf(&ns.Config)
		if ns.Name == "Checksum" && (rc.Mode != remote.ModeRequest || rc.Timeout.String() != "2s") {
			t.Errorf("Checksum's remote block: %+v", rc)
		}
	}
	m := stage.NewManager(stage.Options{})
	if c, err := aio.ConfigOf(m); err != nil || c.Sockets != nil {
		t.Fatalf("aio.ConfigOf a manager without a file: %+v %v", c, err)
	}
	if c, err := profiler.ConfigFrom(m); err != nil || c != (profiler.Config{}) {
		t.Fatalf("profiler.ConfigFrom a manager without a file: %+v %v", c, err)
	}
	// A null cluster block is no cluster.
	cfg, err = stage.ParseConfig([]byte("global:\n  cluster:\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := remote.ClusterFrom(cfg); ok {
		t.Fatal("a null cluster block made a cluster")
	}
}

// Loading any configuration, with every section linked in, fails only
// with a located configuration error.
func FuzzParseConfigWithSections(f *testing.F) {
	for _, doc := range [][]byte{configs.Haboob, configs.HaboobCluster, configs.Gnutella, configs.Arashi} {
		f.Add(doc)
	}
	f.Add([]byte("global:\n  aio: {sockets: {a: {readBuffer: 1KiB}}}\n  cluster: {node: n}\nstages:\n  S: {handler: h, nodes: [n], remote: {mode: durable}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := stage.ParseConfig(data, "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, stage.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "fuzz.yaml: ") {
				t.Fatalf("error %q is not a located config error", err)
			}
			return
		}
		for _, ns := range cfg.Stages {
			if rc := remote.StageConfigOf(&ns.Config); rc.Timeout < 0 || (rc.Mode != remote.ModeRequest && rc.Mode != remote.ModeDurable) {
				t.Fatalf("stage %s: accepted remote block %+v", ns.Name, rc)
			}
		}
		if cc, ok, err := remote.ClusterFrom(cfg); err != nil || (ok && cc.Validate() != nil) {
			t.Fatalf("cluster block %+v accepted: %v", cc, err)
		}
	})
}
