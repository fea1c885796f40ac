//go:build linux

package threadsched

import (
	"runtime"
	"syscall"
	"testing"
	"unsafe"
)

// lockedThread runs on a goroutine of its own, locked to its thread; it calls setup on
// that thread, reports the thread id, and ends the thread when the test does.
func lockedThread(t *testing.T, setup func(tid int) error) int {
	t.Helper()
	tidc, errc, done := make(chan int, 1), make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		tid := syscall.Gettid()
		if err := setup(tid); err != nil {
			errc <- err
			return
		}
		tidc <- tid
		<-done
	}()
	t.Cleanup(func() { close(done) })
	select {
	case tid := <-tidc:
		return tid
	case err := <-errc:
		t.Fatal(err)
		return 0
	}
}

func restoreNormal(t *testing.T) {
	t.Cleanup(func() {
		if _, err := SetProcess(Normal); err != nil {
			t.Error(err)
		}
	})
}

func wantAll(t *testing.T, want Policy, except map[int]Policy) {
	t.Helper()
	got, err := Process()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 {
		t.Fatalf("Process() = %v: want every thread of a Go process (more than one)", got)
	}
	for tid, p := range got {
		w := want
		if e, ok := except[tid]; ok {
			w = e
		}
		if p != w {
			t.Errorf("thread %d: %v; want %v", tid, p, w)
		}
	}
}

func TestSetProcess(t *testing.T) {
	restoreNormal(t)
	wantAll(t, Normal, nil)

	const nice = 5 // raised on one thread: SetProcess must keep it
	niced := lockedThread(t, func(tid int) error { return syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice) })
	prio := func() int {
		p, err := syscall.Getpriority(syscall.PRIO_PROCESS, niced)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := prio()
	idle := lockedThread(t, func(int) error { // made SCHED_IDLE: SetProcess must leave it
		var param struct{ priority int32 }
		if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, uintptr(Idle), uintptr(unsafe.Pointer(&param))); e != 0 {
			return e
		}
		return nil
	})

	n, err := SetProcess(Batch)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("SetProcess(Batch) changed %d threads; want every thread but the idle one", n)
	}
	wantAll(t, Batch, map[int]Policy{idle: Idle})
	if p := prio(); p != before {
		t.Errorf("thread %d's priority %d after SetProcess(Batch); want %d kept", niced, p, before)
	}
	if n, err := SetProcess(Batch); err != nil || n != 0 {
		t.Errorf("SetProcess(Batch) again: %d changed, %v; want 0, nil", n, err)
	}

	// A thread started now takes the policy of the thread that starts it.
	got := make(chan Policy, 1)
	lockedThread(t, func(int) error {
		p, err := Current()
		got <- p
		return err
	})
	if p := <-got; p != Batch {
		t.Errorf("a thread locked after SetProcess(Batch): %v; want batch", p)
	}

	if _, err := SetProcess(Normal); err != nil {
		t.Fatal(err)
	}
	wantAll(t, Normal, map[int]Policy{idle: Idle})
	if p := prio(); p != before {
		t.Errorf("thread %d's priority %d after SetProcess(Normal); want %d kept", niced, p, before)
	}
}

func TestSetProcessRefuses(t *testing.T) {
	for _, p := range []Policy{FIFO, RR, Idle, Policy(42)} {
		if _, err := SetProcess(p); err == nil {
			t.Errorf("SetProcess(%v): nil error; want only normal or batch", p)
		}
	}
}

func TestPolicyString(t *testing.T) {
	for p, want := range map[Policy]string{Normal: "normal", Batch: "batch", Idle: "idle", FIFO: "fifo", RR: "rr", 42: "policy(42)"} {
		if got := p.String(); got != want {
			t.Errorf("Policy(%d).String() = %q; want %q", int(p), got, want)
		}
	}
}
