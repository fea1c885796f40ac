// Package leaktest checks, in tests, that long-lived goroutines end on shutdown.
package leaktest

import (
	"runtime"
	"testing"
	"time"
)

// Wait fails the test, with every goroutine's stack, unless the number of goroutines falls
// back to at most n within 10 s (generous: the deadline matters only when something leaks).
func Wait(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines; want at most %d, as before:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
