package sampler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/hotkeyd/hotkeyd/internal/redistest"
)

// TestMuxAuthAttacks: sequences a client may send to get a command run over the tap's
// authenticated shared connections, or to change who those are authenticated as. Each
// gets through the proxy exactly the replies it gets directly, and afterwards a client
// that authenticates with the configured credentials is still served as that user.
func TestMuxAuthAttacks(t *testing.T) {
	var logs logbuf.Buffer
	srv, p := authProxy(t, "", authPass, &logs)
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "ro", "on", ">ro-pw", "~ro:*", "+get"},
		{"SET", "rw:k", "w"},
	} {
		if _, err := redistest.Command(srv.Addr(), authPass, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	c := muxCmd
	for _, sc := range []struct {
		name   string
		writes []string // sent one after another
		split  bool     // each write byte by byte
		n      int      // replies
	}{
		{"pipelined AUTH then AUTH other", []string{c("AUTH", authPass) + c("AUTH", "ro", "ro-pw") + c("SET", "rw:k", "x")}, false, 3},
		{"AUTH other after AUTH, separate", []string{c("AUTH", authPass), c("GET", "rw:k"), c("AUTH", "ro", "ro-pw"), c("SET", "rw:k", "x")}, false, 4},
		{"HELLO AUTH twice", []string{c("HELLO", "3", "AUTH", "default", "nope", "AUTH", "default", authPass) + c("GET", "rw:k")}, false, 2},
		{"HELLO AUTH twice, other last", []string{c("AUTH", authPass) + c("HELLO", "2", "AUTH", "default", authPass, "AUTH", "ro", "ro-pw") + c("SET", "rw:k", "x")}, false, 3},
		{"HELLO AUTH SETNAME", []string{c("HELLO", "3", "AUTH", "default", authPass, "SETNAME", "x") + c("GET", "rw:k")}, false, 2},
		{"HELLO 2 then AUTH", []string{c("HELLO", "2"), c("AUTH", authPass), c("GET", "rw:k")}, false, 3},
		{"lower case", []string{c("auth", authPass) + c("hello", "3", "auth", "ro", "ro-pw") + c("set", "rw:k", "x")}, false, 3},
		{"AUTH extra arg", []string{c("AUTH", "default", authPass, "x") + c("GET", "rw:k")}, false, 2},
		{"inline AUTH", []string{"AUTH " + authPass + "\r\nGET rw:k\r\n"}, false, 2},
		{"inline AUTH other after AUTH", []string{c("AUTH", authPass) + "AUTH ro ro-pw\r\nSET rw:k x\r\n"}, false, 3},
		{"inline LF", []string{c("AUTH", authPass) + "GET rw:k\nAUTH ro ro-pw\nSET rw:k x\r\n"}, false, 4},
		{"split AUTH", []string{c("AUTH", authPass) + c("GET", "rw:k")}, true, 2},
		{"split AUTH other", []string{c("AUTH", authPass), c("AUTH", "ro", "ro-pw") + c("SET", "rw:k", "x")}, true, 3},
		{"RESET", []string{c("AUTH", authPass), c("RESET"), c("GET", "rw:k")}, false, 3},
		{"RESET pipelined", []string{c("AUTH", authPass) + c("GET", "rw:k") + c("RESET") + c("GET", "rw:k")}, false, 4},
		{"MAINT_NOTIFICATIONS unauthenticated", []string{c("CLIENT", "MAINT_NOTIFICATIONS", "ON") + c("GET", "rw:k")}, false, 2},
		{"SETINFO unauthenticated", []string{c("CLIENT", "SETINFO", "LIB-NAME", "x") + c("GET", "rw:k")}, false, 2},
		{"empty arrays", []string{"*0\r\n*-1\r\n" + c("GET", "rw:k")}, false, 1},
		{"wrong then right", []string{c("AUTH", "nope") + c("AUTH", authPass) + c("GET", "rw:k")}, false, 3},
		{"PING first", []string{c("PING") + c("AUTH", authPass) + c("GET", "rw:k")}, false, 3},
		{"AUTH no arg", []string{c("AUTH") + c("GET", "rw:k")}, false, 2},
		{"HELLO AUTH missing pass", []string{c("HELLO", "3", "AUTH", "default") + c("GET", "rw:k")}, false, 2},
		{"RESP3 RESET", []string{c("HELLO", "3", "AUTH", "default", authPass), c("GET", "rw:k"), c("RESET"), c("GET", "rw:k"), c("HELLO", "3")}, false, 5},
		{"RESP3 then AUTH other", []string{c("HELLO", "3", "AUTH", "default", authPass) + c("GET", "rw:k") + c("HELLO", "3", "AUTH", "ro", "ro-pw") + c("GET", "rw:k") + c("GET", "ro:x")}, false, 5},
		{"RESP3 pinned", []string{c("HELLO", "3", "AUTH", "default", authPass), c("MULTI"), c("GET", "rw:k"), c("EXEC"), c("HGETALL", "none")}, false, 5},
		{"HELLO 03", []string{c("HELLO", "03", "AUTH", "default", authPass) + c("GET", "rw:k")}, false, 2},
	} {
		t.Run(sc.name, func(t *testing.T) {
			run := func(addr string) []string {
				m := muxDial(t, addr)
				for _, w := range sc.writes {
					if sc.split {
						for i := range len(w) {
							m.send(t, w[i:i+1])
							time.Sleep(time.Millisecond)
						}
					} else {
						m.send(t, w)
					}
				}
				var got []string
				for range sc.n {
					got = append(got, m.reply(t))
				}
				return got
			}
			want, got := run(srv.Addr()), run(p.Addr().String())
			for i := range want {
				w, g := want[i], got[i]
				if strings.Contains(w, "proto") && strings.Contains(g, "proto") {
					continue // HELLO's reply: the connection's id differs
				}
				if w != g {
					t.Errorf("reply %d: through the proxy %q; directly %q", i, muxShort(g), muxShort(w))
				}
			}
			if v, _ := redistest.Command(srv.Addr(), authPass, "GET", "rw:k"); v != "w" {
				t.Errorf("rw:k is %q; want w", v)
			}
			// The shared connections still serve the configured user, and only it.
			a := muxDial(t, p.Addr().String())
			a.expect(t, muxOK, "AUTH", authPass)
			a.expect(t, muxOK, "SET", "rw:probe", "y")
			a.expect(t, muxBulk("w"), "GET", "rw:k")
			n := muxDial(t, p.Addr().String())
			if got := n.do(t, "GET", "rw:k"); !strings.HasPrefix(got, "-NOAUTH") {
				t.Errorf("unauthenticated GET after: %q", got)
			}
		})
	}
	if st := p.Stats(); st.SharedFailures != 0 {
		t.Errorf("stats %+v; want no shared failure", st)
	}
	checkNoSecret(t, &logs, authPass, "ro-pw")
}

// TestMuxAuthRedial: after Redis closes the shared connections, the new ones are
// authenticated again: an authenticated client goes on, and one that is not still gets
// NOAUTH.
func TestMuxAuthRedial(t *testing.T) {
	var logs logbuf.Buffer
	srv, p := authProxy(t, "", authPass, &logs)
	a := muxDial(t, p.Addr().String())
	a.expect(t, muxOK, "AUTH", authPass)
	a.expect(t, muxOK, "SET", "rd:k", "v")
	for range 3 {
		if _, err := redistest.Command(srv.Addr(), authPass, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		a.expect(t, muxBulk("v"), "GET", "rd:k")
		a.send(t, muxCmd("AUTH", authPass)+muxCmd("SET", "rd:k", "v"))
		if got := a.reply(t) + a.reply(t); got != muxOK+muxOK {
			t.Fatalf("AUTH, SET: %q", got)
		}
	}
	n := muxDial(t, p.Addr().String())
	if got := n.do(t, "GET", "rd:k"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Errorf("unauthenticated GET: %q", got)
	}
	checkNoSecret(t, &logs, authPass)
}
