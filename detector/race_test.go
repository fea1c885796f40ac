//go:build race

package detector

// raceEnabled is true when tests run under the race detector, which makes each update
// some ten times slower: long feeds shorten themselves.
const raceEnabled = true
