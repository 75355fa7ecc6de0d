package aio

import (
	"github.com/sandstorm-go/sandstorm/stage"
)

// Linking aio in makes stage.ParseConfig (Load, Parse) check the
// `global.aio` block, so a mistake there fails the load.
func init() {
	stage.RegisterSection(sectionName, stage.SectionFunc(func(d stage.Decoder) (any, error) {
		return ParseConfig(d)
	}))
}
