//go:build !unix

package aio

import "errors"

// shutdownWrite is not supported here: Linger closes like Close.
func shutdownWrite(int) error { return errors.New("aio: half-close unsupported") }
