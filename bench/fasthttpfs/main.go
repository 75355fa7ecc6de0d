// Command fasthttpfs is the fasthttp reference of the Haboob benchmark
// (bench/run.sh, bench/figs37-40.sh): fasthttp's FS handler on a directory,
// set up like the nginx of those scripts. Files above 8 KiB are sent with
// sendfile (fasthttp does that for every file it serves from the OS file
// system), open files and small files are cached for 60 s (nginx's
// open_file_cache inactive=60s), compression is off, byte ranges are on.
//
//	fasthttpfs -addr 127.0.0.1:8083 -root DIR
//
// It is its own module (bench/fasthttpfs/go.mod) so that the library's
// module does not depend on fasthttp.
package main

import (
	"flag"
	"log"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8083", "listen address")
	root := flag.String("root", ".", "directory to serve")
	cacheFor := flag.Duration("cache", 60*time.Second, "how long an unused open file stays cached")
	flag.Parse()

	fs := &fasthttp.FS{
		Root:            *root,
		Compress:        false,
		AcceptByteRange: true,
		CacheDuration:   *cacheFor,
	}
	server := &fasthttp.Server{Handler: fs.NewRequestHandler(), Name: "fasthttpfs"}
	log.Printf("fasthttpfs: serving %s on %s", *root, *addr)
	log.Fatal(server.ListenAndServe(*addr))
}
