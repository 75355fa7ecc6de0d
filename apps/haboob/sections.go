package haboob

// configs/haboob.yaml, this application's configuration, has a
// global.profiler section. Linking the profiler in registers the section
// with stage, so that a program that imports only this package loads the
// file (a section no linked-in package registered is an unknown key).
import _ "github.com/sandstorm-go/sandstorm/profiler"
