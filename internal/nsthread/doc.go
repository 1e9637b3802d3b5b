// Package nsthread runs a function on an OS thread that has joined another
// process's namespace (a sandbox's UTS or network namespace), from the host.
//
// setns(2) changes only the calling thread, and Go moves goroutines between
// threads: the thread is locked to a fresh goroutine for the whole call and
// is then thrown away, never handed back to the scheduler, so no other
// goroutine ever runs inside the sandbox's namespace. Linux only.
package nsthread
