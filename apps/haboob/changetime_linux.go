package haboob

import (
	"io/fs"
	"syscall"
	"time"
)

// changeTime is info's change time (ctime: set to now by any change of
// the file's names or metadata, and never set back by a call), or its
// modification time if info carries none.
func changeTime(info fs.FileInfo) time.Time {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return info.ModTime()
}
