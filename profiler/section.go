package profiler

import (
	"github.com/sandstorm-go/sandstorm/stage"
)

// Linking the profiler in makes stage.ParseConfig (Load, Parse) check the
// `global.profiler` block, so a mistake there fails the load, and makes
// managers built by stage.Load and stage.Parse run the profiler the block
// switches on.
func init() {
	stage.RegisterSection(sectionName, stage.SectionFunc(func(d stage.Decoder) (any, error) {
		return DecodeConfig(d)
	}))
	// A manager made by stage.Load or stage.Parse runs the profiler its
	// file configures: the profile log, the graph and the dashboard, with
	// the manager's logger.
	stage.RegisterService("profiler", func(m *stage.Manager) (stage.Service, error) {
		cfg, err := ConfigFrom(m)
		if err != nil || !cfg.active() {
			return nil, err
		}
		return New(m, cfg, m.Logger())
	})
}
