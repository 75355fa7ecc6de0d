// Package clock holds the module's small time helpers. Use Sleep for a
// pause that a context can cut short.
//
// It does not fake time: controllers take the time as an argument
// (Observe(now)) and components take a Now or After function in their
// config; this package is for the code that really waits.
package clock
