package aio

import (
	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/stage"
)

// Linking aio in makes stage.ParseConfig (Load, Parse) check the
// `global.aio` block, so a mistake there fails the load.
func init() {
	stage.RegisterSection("aio", func(n *yaml.Node, path string) error {
		_, err := ParseConfig(n, path)
		return err
	})
}
