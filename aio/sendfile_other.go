//go:build !linux

package aio

import (
	"errors"

	"github.com/panjf2000/gnet/v2"
)

// errSocketFull is never reported here: segments are copied through
// gnet's buffer, which waits for the socket itself.
var errSocketFull = errors.New("aio: socket full")

// sendFileSegment copies the segment through gnet's buffer (no sendfile
// here).
func sendFileSegment(gc gnet.Conn, f *SharedFile, off, n int64) (int64, error) {
	return copyFileSegment(gc, f, off, n)
}

// writeCorked writes nothing here: gnet writes bufs.
func writeCorked(_ gnet.Conn, bufs [][]byte) [][]byte { return bufs }

// writePoller does not exist here: the drain poll comes back to a
// connection whose socket is full.
type writePoller struct{}

func (c *Connection) waitWritableLocked(gnet.Conn) {}

func (c *Connection) forgetWritable(gnet.Conn) {}

func (fs *fileSending) stop() {}
