package sampler

import (
	"bytes"
	"crypto/subtle"
	"fmt"
)

// Sharing with a Redis that wants AUTH: see Proxy and ProxyOptions.UpstreamPassword.

// upstreamAuth holds the credentials the shared connections authenticate with
// (ProxyOptions.UpstreamUsername and UpstreamPassword), and the commands that present
// them. Nothing that prints it shows the password.
type upstreamAuth struct {
	user   []byte // the ACL user: "default" when none was configured
	pass   []byte
	legacy bool   // `AUTH password`, which authenticates user default, is these credentials
	auth   string // AUTH [user] password, as RESP
	hello3 string // HELLO 3 AUTH user password, as RESP
}

// newUpstreamAuth returns the credentials of user (empty for user default) and pass;
// nil when pass is empty (none configured).
func newUpstreamAuth(user, pass string) *upstreamAuth {
	if pass == "" {
		return nil
	}
	a := &upstreamAuth{user: []byte(user), pass: []byte(pass), legacy: user == "" || user == "default"}
	if user == "" {
		a.user = []byte("default")
		a.auth = encodeCommand("AUTH", pass)
	} else {
		a.auth = encodeCommand("AUTH", user, pass)
	}
	a.hello3 = encodeCommand("HELLO", "3", "AUTH", string(a.user), pass)
	return a
}

// String shows the user only.
func (a *upstreamAuth) String() string {
	return fmt.Sprintf("user %q, password ***", a.user)
}

// GoString shows the user only.
func (a *upstreamAuth) GoString() string { return a.String() }

// redact replaces the password in a server's reply, which a log may show, with ***.
// Redis does not echo passwords; this makes sure.
func (a *upstreamAuth) redact(reply []byte) []byte {
	return bytes.ReplaceAll(reply, a.pass, []byte("***"))
}

// matches reports whether user (named: given, as in AUTH user password; otherwise user
// default) and pass are the configured credentials, in time that does not depend on
// where the password differs.
func (a *upstreamAuth) matches(user []byte, named bool, pass []byte) bool {
	passOK := subtle.ConstantTimeCompare(pass, a.pass) == 1
	userOK := a.legacy
	if named {
		userOK = subtle.ConstantTimeCompare(user, a.user) == 1
	}
	return passOK && userOK
}

// authKind is what a client's command does about authentication.
type authKind uint8

const (
	authNone  authKind = iota // neither AUTH nor HELLO with AUTH
	authMatch                 // AUTH, or HELLO 2|3 AUTH without SETNAME, with the configured credentials
	authOther                 // AUTH or HELLO with AUTH in any other form or with other credentials
)

// authArgs parses the bytes of one whole command, sent by a client, again to see all its
// arguments, which a client's parser may have skipped: AUTH and HELLO … AUTH are rare
// (once per connection), so parsing twice costs nothing that matters.
type authArgs struct {
	ps *RESPParser
}

// classify reports what the command whose name and count of arguments a client's parser
// reported, and whose bytes are raw, does about authentication
// against a; proto is the protocol a HELLO asks for (2 or 3), 0 for AUTH. Only a
// command sent as a RESP array may be authMatch: Redis splits inline commands with
// quoting rules of its own.
func (aa *authArgs) classify(a *upstreamAuth, name []byte, nargs int, raw []byte) (kind authKind, proto int) {
	isAuth := bytes.EqualFold(name, []byte("AUTH"))
	if !isAuth && !(bytes.EqualFold(name, []byte("HELLO")) && nargs >= 3) {
		return authNone, 0
	}
	if len(raw) == 0 || raw[0] != '*' || nargs > 7 {
		return authOther, 0
	}
	if aa.ps == nil {
		aa.ps, _ = NewRESPParser(RESPOptions{MaxArgs: 8, MaxArgBytes: respMaxInline})
	}
	ps := aa.ps
	ps.Reset()
	ps.Feed(raw)
	if !ps.Next() || ps.Truncated() {
		return authOther, 0 // an argument longer than any password we take
	}
	args := ps.Args()
	if isAuth {
		switch {
		case len(args) == 2 && a.matches(nil, false, args[1]):
			return authMatch, 0
		case len(args) == 3 && a.matches(args[1], true, args[2]):
			return authMatch, 0
		}
		return authOther, 0
	}
	// HELLO protover [AUTH username password] [SETNAME clientname]
	var user, pass []byte
	withAuth, setName := false, false
	for i := 2; i < len(args); {
		switch {
		case bytes.EqualFold(args[i], []byte("AUTH")) && i+2 < len(args):
			withAuth, user, pass = true, args[i+1], args[i+2]
			i += 3
		case bytes.EqualFold(args[i], []byte("SETNAME")) && i+1 < len(args):
			setName = true
			i += 2
		default:
			return authOther, 0 // Redis answers a syntax error
		}
	}
	switch {
	case !withAuth:
		return authNone, 0
	case setName || !a.matches(user, true, pass):
		return authOther, 0
	}
	switch string(args[1]) {
	case "2":
		return authMatch, 2
	case "3":
		return authMatch, 3
	}
	return authOther, 0
}
