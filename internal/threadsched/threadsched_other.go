//go:build !linux

package threadsched

// Supported reports whether this platform has the policies.
const Supported = false

// SetProcess returns ErrUnsupported: policies are Linux only.
func SetProcess(Policy) (int, error) { return 0, ErrUnsupported }

// Process returns ErrUnsupported: policies are Linux only.
func Process() (map[int]Policy, error) { return nil, ErrUnsupported }

// Current returns ErrUnsupported: policies are Linux only.
func Current() (Policy, error) { return Normal, ErrUnsupported }
