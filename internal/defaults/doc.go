// Package defaults fills options left at their zero value, the convention of every
// Options struct in hotkeyd: the zero value of a field picks its default.
package defaults
