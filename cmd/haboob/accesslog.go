package main

import (
	"log/slog"

	"github.com/sandstorm-go/sandstorm/http/accesslog"
	"github.com/sandstorm-go/sandstorm/stage"
)

// accessLogFlags are -access-log and -access-log-format.
type accessLogFlags struct{ path, format string }

// openAccessLog opens the access log the flags ask for (nil: none).
func (f *clusterFlags) openAccessLog() (*accesslog.Log, error) {
	if f == nil || f.access.path == "" {
		return nil, nil
	}
	format, err := accesslog.ParseFormat(f.access.format)
	if err != nil {
		return nil, err
	}
	return accesslog.Open(f.access.path, accesslog.Config{Format: format})
}

// closeAccessLog flushes and closes al (nil: nothing).
func closeAccessLog(al *accesslog.Log) error {
	if al == nil {
		return nil
	}
	return al.Close()
}

// attachAccessLog gives al (nil: nothing) its stage on m and its gauges
// in m's metrics.
func attachAccessLog(log *slog.Logger, al *accesslog.Log, m *stage.Manager) error {
	if al == nil {
		return nil
	}
	if err := al.Attach(m); err != nil {
		return err
	}
	if err := al.Register(m.Metrics()); err != nil {
		log.Warn("haboob: access log metrics not registered", "err", err)
	}
	return nil
}
