// Package dataset reads the key-popularity traces in ../shared/data (beside the project's
// root) for accuracy tests and benchmarks: each trace becomes the sequence of its keys, in
// order, with exact counts alongside to measure approximate structures against.
package dataset
