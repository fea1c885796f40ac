package sampler

import (
	"os"
	"syscall"
)

// LoopBatched reports whether p's loop of the shared connections started with a batch
// of reads and writes through io_uring; false when p has no loop.
func LoopBatched(p *Proxy) bool {
	p.muxMu.Lock()
	defer p.muxMu.Unlock()
	return p.loop != nil && p.loop.batchFD >= 0
}

// BreakLoopBatch makes io_uring fail for p's loop from its next batch on, as a kernel
// that turned against it would: /dev/null takes the place of its descriptor. False when
// p's loop has no batch.
func BreakLoopBatch(p *Proxy) (bool, error) {
	p.muxMu.Lock()
	defer p.muxMu.Unlock()
	if p.loop == nil || p.loop.batchFD < 0 {
		return false, nil
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return false, err
	}
	defer null.Close()
	return true, syscall.Dup3(int(null.Fd()), p.loop.batchFD, syscall.O_CLOEXEC)
}
