//go:build unix

package aio

import "syscall"

// shutdownWrite half-closes a socket: the peer reads EOF after the bytes
// sent, and the socket can still receive.
func shutdownWrite(fd int) error { return syscall.Shutdown(fd, syscall.SHUT_WR) }
