//go:build !linux

package haboob

import (
	"io/fs"
	"time"
)

// changeTime is info's modification time: the change time is read on
// Linux alone (elsewhere a .gz file added to a directory whose
// modification time is then set back is seen once its entry expires).
func changeTime(info fs.FileInfo) time.Time { return info.ModTime() }
