//go:build linux

package threadsched

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// lockedThread runs on a goroutine of its own, locked to a thread other than the main
// one; it calls setup on that thread, reports the thread id, and ends the thread when
// the test does. (A goroutine that ends locked to the main thread does not end it.)
func lockedThread(t *testing.T, setup func(tid int) error) int {
	t.Helper()
	done, locked := make(chan struct{}), 0
	t.Cleanup(func() {
		close(done)
		if locked != 0 {
			waitGone(t, locked)
		}
	})
	for {
		tidc, errc := make(chan int, 1), make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			tid := syscall.Gettid()
			if tid == os.Getpid() {
				// The main thread: hold it until the test ends, so that the next try
				// gets another thread, then give it back.
				tidc <- 0
				<-done
				runtime.UnlockOSThread()
				return
			}
			// Never unlocked: the thread ends with the goroutine.
			if err := setup(tid); err != nil {
				errc <- err
				return
			}
			tidc <- tid
			<-done
		}()
		select {
		case err := <-errc:
			t.Fatal(err)
		case tid := <-tidc:
			if tid == 0 {
				continue
			}
			locked = tid
			return tid
		}
	}
}

// waitGone waits for thread tid to end, so that the next test does not see it.
func waitGone(t *testing.T, tid int) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
			return
		}
	}
	t.Errorf("thread %d still runs 5s after its goroutine ended", tid)
}

// settle calls SetProcess(p) until a call changes no thread, and returns how many the
// calls changed in all. A thread the runtime starts during a call, from a thread that
// call has not reached yet, keeps the old policy: the next call changes it (as the
// proxy's scheduler does every second).
func settle(t *testing.T, p Policy) int {
	t.Helper()
	total := 0
	for range 20 {
		n, err := SetProcess(p)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
	t.Fatalf("SetProcess(%v) still changed threads after 20 calls", p)
	return total
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

	if n := settle(t, Batch); n < 2 {
		t.Errorf("SetProcess(Batch) changed %d threads; want every thread but the idle one", n)
	}
	wantAll(t, Batch, map[int]Policy{idle: Idle})
	if p := prio(); p != before {
		t.Errorf("thread %d's priority %d after SetProcess(Batch); want %d kept", niced, p, before)
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

	settle(t, Normal)
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

// BenchmarkNanosleep measures how long a raw nanosleep lasts (ns/op) on a locked thread,
// with the thread's default timer slack (50 µs) and with the slack at 1 ns: a sleep
// lasts at least its slack longer than asked. docs/BENCHMARKS.md ("the sleeping hold
// with the sleep it was meant to have") reads it:
//
//	go test ./internal/threadsched -run '^$' -bench Nanosleep -benchtime 2000x
func BenchmarkNanosleep(b *testing.B) {
	for _, slack := range []int{0, 1} { // 0: the default
		for _, d := range []time.Duration{5 * time.Microsecond, 15 * time.Microsecond, 50 * time.Microsecond} {
			name := fmt.Sprintf("slack=default/%v", d)
			if slack > 0 {
				name = fmt.Sprintf("slack=%dns/%v", slack, d)
			}
			b.Run(name, func(b *testing.B) {
				runtime.LockOSThread() // the slack is the thread's; the thread ends with the goroutine
				if slack > 0 {
					if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0, 0); e != 0 {
						b.Fatalf("prctl(PR_SET_TIMERSLACK): %v", e)
					}
				}
				ts := syscall.NsecToTimespec(int64(d))
				for b.Loop() {
					syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
				}
			})
		}
	}
}
