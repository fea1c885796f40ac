package resp

import "testing"

func TestCommand(t *testing.T) {
	if got, want := Command("GET", "k"), "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"; got != want {
		t.Errorf("Command(GET, k) = %q; want %q", got, want)
	}
	if got, want := Command("SET", "k", ""), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"; got != want {
		t.Errorf("Command(SET, k, \"\") = %q; want %q", got, want)
	}
	if got, want := Bulk("abc"), "$3\r\nabc\r\n"; got != want {
		t.Errorf("Bulk(abc) = %q; want %q", got, want)
	}
}
