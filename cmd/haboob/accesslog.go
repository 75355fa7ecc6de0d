package main

import "github.com/sandstorm-go/sandstorm/http/accesslog"

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
