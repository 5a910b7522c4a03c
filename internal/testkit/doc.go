// Package testkit is the test toolkit every package's tests share: one
// wait helper (WaitFor), one client that speaks the line protocol over a
// connection (LineClient), and building the rollcall binary for tests
// that run it as a process (BuildRollcall).
//
// It is imported by _test.go files only; nothing in it may be used by the
// product's code.
package testkit
