// Package fdtest runs a test's process out of file descriptors, so that a
// server's accept(2) fails with EMFILE while the test watches it keep
// serving and recover: use Exhaust, then Restore.
//
// It lowers RLIMIT_NOFILE to a little above the highest descriptor open
// and fills what is left with /dev/null, so it needs Linux (/proc/self/fd)
// and skips the test elsewhere. The limit is the whole process's: tests
// using it must not run in parallel with others.
package fdtest
