package defaults

import (
	"testing"
	"time"
)

func TestOr(t *testing.T) {
	if got := Or(0, 7); got != 7 {
		t.Errorf("Or(0, 7) = %d; want 7", got)
	}
	if got := Or(-3, 7); got != -3 {
		t.Errorf("Or(-3, 7) = %d; want -3: only the zero value is replaced", got)
	}
	if got := Or("", "x"); got != "x" {
		t.Errorf(`Or("", "x") = %q; want "x"`, got)
	}
	if got := Or(time.Second, time.Minute); got != time.Second {
		t.Errorf("Or(1s, 1m) = %v; want 1s", got)
	}
}
