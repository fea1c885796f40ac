// Package bench is hotkeyd's load generators and peer comparisons, kept in a module of
// their own so that what they need never reaches the main module (CONVENTIONS.md rule 16).
//
// Its main command, cmd/loadrun, starts the real binaries on loopback (redis-server,
// hotkeyd, nutcracker), drives them, and prints markdown tables for docs/BENCHMARKS.md.
// Every figure is a ratio against a baseline measured in the same run, over a few
// interleaved rounds, because the machine it runs on is small and shared. See
// scripts/bench.sh and `go run ./cmd/loadrun -h`. Two smaller ones drive addresses
// already running: cmd/pipebefore writes a whole pipeline before reading, and
// cmd/newconns connects for each pipeline, as short-lived clients do.
package bench
