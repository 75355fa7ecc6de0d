// Package haboob is the Haboob web server of the SEDA thesis (chapter 6) as a
// graph of Sandstorm stages: HttpRecv dispatches parsed requests, PageCache
// serves hits from an in-memory cache (hits before misses, shortest first
// within a batch), CacheMiss reads files through asyncFile and inserts them,
// HttpSend formats and sends responses, and dynamic stages serve computed
// pages. Any rejected enqueue becomes a 503 to that client, never a hang.
//
// This file set also holds the static-serving rules users expect of a web
// server: index files, directory redirects, MIME types, conditional GET
// (ETag, If-Modified-Since → 304), single byte ranges (206, 416), and a
// document root nothing escapes (.., encoded dots, symbolic links).
package haboob
