package profiler

import (
	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/stage"
)

// Linking the profiler in makes stage.ParseConfig (Load, Parse) check the
// `global.profiler` block, so a mistake there fails the load.
func init() {
	stage.RegisterSection("profiler", func(n *yaml.Node, _ string) error {
		_, err := DecodeConfig(n, "")
		return err
	})
}
