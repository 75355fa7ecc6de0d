// Command fileserver is the plain Go reference of the Haboob benchmark
// (bench/run.sh): net/http.FileServer on a directory, a goroutine per
// connection.
//
//	fileserver -addr 127.0.0.1:8082 -root DIR
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8082", "listen address")
	root := flag.String("root", ".", "directory to serve")
	flag.Parse()
	log.Printf("fileserver: serving %s on %s", *root, *addr)
	log.Fatal(http.ListenAndServe(*addr, http.FileServer(http.Dir(*root))))
}
