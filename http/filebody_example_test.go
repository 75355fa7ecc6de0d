package http_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
)

// A response whose body is a region of an open file: on a plain
// connection it is sent with sendfile, the bytes never copied into the
// process. The reply holds one reference to the file; the connection
// releases it once the bytes are sent (or dropped, or not sent at all as
// for HEAD). Another writer, such as an HTTP/2 stream, reads the region
// with ReadAt and releases it itself.
func ExampleNewFileBodyResponse() {
	dir, _ := os.MkdirTemp("", "filebody")
	defer os.RemoveAll(dir)
	name := filepath.Join(dir, "hello.txt")
	_ = os.WriteFile(name, []byte("hello, world\n"), 0o644)
	f, err := os.Open(name)
	if err != nil {
		fmt.Println(err)
		return
	}
	shared := aio.NewSharedFile(f) // one reference: handed to the response

	resp := http.NewFileBodyResponse(http.StatusOK, "text/plain", shared, 7, 5)
	// http.Respond(req, resp) would send it; here a reader reads it by pread.
	body := make([]byte, resp.File.Length)
	_, _ = resp.File.File.ReadAt(body, resp.File.Offset)
	resp.File.File.Release()
	fmt.Printf("%d %q, file closed: %v\n", resp.ContentLength, body, shared.Closed())
	// Output:
	// 5 "world", file closed: true
}
