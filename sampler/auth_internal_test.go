package sampler

import (
	"fmt"
	"strings"
	"testing"
)

// TestAuthClassify: which AUTH and HELLO commands present exactly the configured
// credentials (and so may go over the shared connections), for the user default and for
// an ACL user.
func TestAuthClassify(t *testing.T) {
	long := strings.Repeat("p", respMaxInline+1)
	tests := []struct {
		user  string // configured
		cmd   string
		kind  authKind
		proto int
	}{
		{"", encodeCommand("AUTH", "pw"), authMatch, 0},
		{"", encodeCommand("auth", "pw"), authMatch, 0},
		{"", encodeCommand("AUTH", "default", "pw"), authMatch, 0},
		{"default", encodeCommand("AUTH", "pw"), authMatch, 0},
		{"", encodeCommand("AUTH", "Default", "pw"), authOther, 0}, // user names are case-sensitive
		{"", encodeCommand("AUTH", "PW"), authOther, 0},
		{"", encodeCommand("AUTH", "pw2"), authOther, 0},
		{"", encodeCommand("AUTH", "app", "pw"), authOther, 0},
		{"", encodeCommand("AUTH"), authOther, 0},
		{"", encodeCommand("AUTH", "a", "b", "c"), authOther, 0},
		{"", "AUTH pw\r\n", authOther, 0}, // inline: Redis's quoting rules
		{"", encodeCommand("AUTH", long), authOther, 0},
		{"app", encodeCommand("AUTH", "pw"), authOther, 0}, // user default
		{"app", encodeCommand("AUTH", "app", "pw"), authMatch, 0},
		{"app", encodeCommand("HELLO", "3", "AUTH", "app", "pw"), authMatch, 3},
		{"app", encodeCommand("HELLO", "3", "AUTH", "default", "pw"), authOther, 0},
		{"", encodeCommand("HELLO", "3", "auth", "default", "pw"), authMatch, 3},
		{"", encodeCommand("HELLO", "2", "AUTH", "default", "pw"), authMatch, 2},
		{"", encodeCommand("HELLO", "4", "AUTH", "default", "pw"), authOther, 0},
		{"", encodeCommand("HELLO", "3", "AUTH", "default", "nope"), authOther, 0},
		{"", encodeCommand("HELLO", "3", "AUTH", "default", "pw", "SETNAME", "x"), authOther, 0},
		{"", encodeCommand("HELLO", "3", "SETNAME", "x", "AUTH", "default", "pw"), authOther, 0},
		{"", encodeCommand("HELLO", "3", "AUTH", "default"), authOther, 0},
		{"", encodeCommand("HELLO", "3", "SETNAME", "x"), authNone, 0},
		{"", encodeCommand("HELLO", "3"), authNone, 0},
		{"", encodeCommand("GET", "pw"), authNone, 0},
	}
	var aa authArgs
	for _, tt := range tests {
		a := newUpstreamAuth(tt.user, "pw")
		ps, _ := NewRESPParser(RESPOptions{})
		ps.Feed([]byte(tt.cmd))
		if !ps.Skip() {
			t.Fatalf("%q does not parse", tt.cmd)
		}
		kind, proto := aa.classify(a, ps.Name(), ps.NArgs(), []byte(tt.cmd))
		if kind != tt.kind || proto != tt.proto {
			t.Errorf("user %q, %.60q: got %d, %d; want %d, %d", tt.user, tt.cmd, kind, proto, tt.kind, tt.proto)
		}
	}
}

// TestUpstreamAuthHidesPassword: printing the credentials shows no password.
func TestUpstreamAuthHidesPassword(t *testing.T) {
	if newUpstreamAuth("app", "") != nil {
		t.Error("no password: got credentials; want nil")
	}
	a := newUpstreamAuth("app", "s3cret")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(verb, a); strings.Contains(got, "s3cret") {
			t.Errorf("%s: %q shows the password", verb, got)
		}
	}
	if got := string(a.redact([]byte("-ERR bad s3cret\r\n"))); got != "-ERR bad ***\r\n" {
		t.Errorf("redact: got %q", got)
	}
}
