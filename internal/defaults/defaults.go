package defaults

// Or returns v, or def when v is the zero value of its type.
func Or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
