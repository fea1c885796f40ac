// Package redistest starts real Redis servers on loopback for tests: a standalone
// redis-server (Start, or StartAt an address the test chose), an N-primary Redis Cluster
// (StartCluster), twemproxy in front of a server (StartTwemproxy), and runs of
// redis-benchmark against either (RunBenchmark). There are no mocks: every helper runs
// the Debian binaries found on PATH, in a t.TempDir(), with persistence off, and stops
// them in t.Cleanup.
//
// A helper that cannot find redis-server, redis-cli, redis-benchmark or nutcracker fails
// the test with a message that says to run ./scripts/test.sh, which installs them.
//
// The helpers take a testing.TB and are safe to call from parallel tests; the values they
// return are safe for concurrent use.
package redistest
