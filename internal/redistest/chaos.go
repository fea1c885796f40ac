package redistest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Helpers that change a running cluster under a test: a replica for a primary, a
// failover to it, a node paused (SIGSTOP) and resumed (SIGCONT), a node killed. They add
// to StartCluster and leave what it does unchanged: Cluster.Addrs and Nodes keep naming
// the primaries the cluster started with, whatever role those nodes have now.

// ID returns the node's cluster node ID (CLUSTER MYID).
func (s *Server) ID(t testing.TB) string {
	t.Helper()
	id, err := command(s.addr, s.password, "CLUSTER", "MYID")
	if err != nil {
		t.Fatalf("redistest: %s CLUSTER MYID: %v", s.addr, err)
	}
	return id
}

// Pause stops the server process with SIGSTOP: it keeps its sockets, accepts TCP
// connections into the listen backlog and answers nothing until Resume. A paused server
// is resumed when the test ends, before it is stopped.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: SIGSTOP %s: %v", s.addr, err)
	}
	t.Cleanup(func() { _ = s.cmd.Process.Signal(syscall.SIGCONT) })
}

// Resume continues a server stopped by Pause (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("redistest: SIGCONT %s: %v", s.addr, err)
	}
}

// Kill ends the server at once with SIGKILL (a crash: no shutdown, no last replication)
// and waits for the process to exit.
func (s *Server) Kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// AddReplica starts a cluster node on a free port, joins it to the cluster as a replica
// of primary (CLUSTER MEET, CLUSTER REPLICATE), and waits until its replication link is
// up, it has the primary's data, and every primary of the cluster knows it. It is stopped
// when the test ends.
func (c *Cluster) AddReplica(t testing.TB, primary *Server) *Server {
	t.Helper()
	node, err := launchClusterNode(t, lookPath(t, "redis-server"))
	if err != nil {
		t.Fatalf("redistest: start replica node: %v", err)
	}
	if _, err := command(primary.addr, "", "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(node.port)); err != nil {
		t.Fatalf("redistest: CLUSTER MEET %s: %v", node.addr, err)
	}
	pid := primary.ID(t)
	deadline := time.Now().Add(startTimeout)
	for {
		_, err := command(node.addr, "", "CLUSTER", "REPLICATE", pid)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s CLUSTER REPLICATE %s: %v", node.addr, pid, err)
		}
		time.Sleep(50 * time.Millisecond) // the replica does not know the primary yet
	}
	want := []string{"cluster_state:ok", "cluster_known_nodes:" + strconv.Itoa(c.knownNodes()+1)}
	for {
		// notReady says what is not ready yet, "" once everything is.
		notReady := func() string {
			info, err := command(node.addr, "", "INFO", "replication")
			if err != nil || !strings.Contains(info, "master_link_status:up") || strings.Contains(info, "master_sync_in_progress:1") {
				return fmt.Sprintf("replica's INFO replication %q, %v; want master_link_status:up, no sync in progress", info, err)
			}
			for _, p := range c.nodes {
				if ci, err := command(p.addr, "", "CLUSTER", "INFO"); err != nil || !containsAll(ci, want) {
					return fmt.Sprintf("primary %s CLUSTER INFO %q, %v; want lines %q", p.addr, ci, err, want)
				}
			}
			return ""
		}()
		if notReady == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s of %s not ready after %v: %s", node.addr, primary.addr, startTimeout, notReady)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.replicas = append(c.replicas, node)
	return node
}

// knownNodes is how many nodes the cluster has: its primaries and the replicas added.
func (c *Cluster) knownNodes() int { return len(c.nodes) + len(c.replicas) }

// Failover makes replica a primary in place of its primary with CLUSTER FAILOVER, with
// option "" (a coordinated failover: the primary stops writes until the replica has
// caught up, no write is lost), "FORCE" (without the primary's agreement, with the other
// primaries' vote) or "TAKEOVER" (without any agreement: for a primary that is down or
// paused). It waits until replica reports role master and, asked with CLUSTER NODES,
// every node in alive names replica as the owner of the slots.
func (c *Cluster) Failover(t testing.TB, replica *Server, option string, alive ...*Server) {
	t.Helper()
	args := []string{"CLUSTER", "FAILOVER"}
	if option != "" {
		args = append(args, option)
	}
	if _, err := command(replica.addr, "", args...); err != nil {
		t.Fatalf("redistest: %s %s: %v", replica.addr, strings.Join(args, " "), err)
	}
	deadline := time.Now().Add(startTimeout)
	id := replica.ID(t)
	for {
		// notYet says where replica is not the primary yet, "" once it is everywhere.
		notYet := func() string {
			if role, err := command(replica.addr, "", "ROLE"); err != nil || !strings.HasPrefix(role, "master") {
				return fmt.Sprintf("its ROLE is %q, %v; want master", role, err)
			}
			for _, n := range alive {
				if nodes, err := command(n.addr, "", "CLUSTER", "NODES"); err != nil || !ownsSlots(nodes, id) {
					return fmt.Sprintf("%s's CLUSTER NODES does not name it (%s) a master with slots: %q, %v", n.addr, id, nodes, err)
				}
			}
			return ""
		}()
		if notYet == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s %s: not primary everywhere after %v: %s",
				replica.addr, strings.Join(args, " "), startTimeout, notYet)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownsSlots reports whether, in a CLUSTER NODES reply, node id is a master with slots.
func ownsSlots(nodes, id string) bool {
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) > 8 && f[0] == id && strings.Contains(f[2], "master") {
			return true
		}
	}
	return false
}

// String names the server, for messages.
func (s *Server) String() string { return fmt.Sprintf("redis-server %s", s.addr) }

// MoveSlot moves slot from the primary at from to the primary at to for real, as
// redis-cli --cluster reshard does: IMPORTING on the target, MIGRATING on the source,
// MIGRATE of its keys, then SETSLOT NODE on every node of c.
func (c *Cluster) MoveSlot(t testing.TB, slot int, from, to string) {
	t.Helper()
	do := func(addr string, args ...string) string {
		t.Helper()
		out, err := Command(addr, "", args...)
		if err != nil {
			t.Fatalf("redistest: %s %s: %v", addr, strings.Join(args, " "), err)
		}
		return out
	}
	fromID, toID := do(from, "CLUSTER", "MYID"), do(to, "CLUSTER", "MYID")
	host, port, _ := net.SplitHostPort(to)
	s := strconv.Itoa(slot)
	do(to, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID)
	do(from, "CLUSTER", "SETSLOT", s, "MIGRATING", toID)
	for {
		keys := do(from, "CLUSTER", "GETKEYSINSLOT", s, "100")
		if keys == "" {
			break
		}
		do(from, append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, strings.Split(keys, "\n")...)...)
	}
	for _, a := range append([]string{to, from}, c.Addrs()...) {
		do(a, "CLUSTER", "SETSLOT", s, "NODE", toID)
	}
}
