//go:build linux

package sampler

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reasonSink counts drops by reason; safe for concurrent use.
type reasonSink struct {
	mu      sync.Mutex
	drops   map[string]int
	samples int
}

func (s *reasonSink) Accept(b Batch) {
	s.mu.Lock()
	s.samples += len(b.Samples)
	s.mu.Unlock()
}

func (s *reasonSink) Drop(_, reason string, n int) {
	s.mu.Lock()
	s.drops[reason] += n
	s.mu.Unlock()
}

func (s *reasonSink) get(reason string) (drops, samples int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drops[reason], s.samples
}

// TestUDPKernelDropsCounted: datagrams the kernel drops because the socket's buffer is
// full (the readers fell behind) are counted as DropOverload, as README lists: before,
// an overloaded agent lost reports without a trace in its metrics.
func TestUDPKernelDropsCounted(t *testing.T) {
	sink := &reasonSink{drops: map[string]int{}}
	srv, err := NewUDPServer(UDPOptions{Listen: "127.0.0.1:0", Sink: sink, Readers: 1, SocketBuffer: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn, err := net.DialUDP("udp", nil, srv.Addr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	data, err := AppendReport(nil, reportBatch("burst", 1, 20), nil)
	if err != nil {
		t.Fatal(err)
	}
	// No reader yet: the buffer fills and the kernel drops the rest.
	const sent = 3000
	for range sent {
		if _, err := conn.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	go srv.Serve(context.Background())
	// The drop count comes with the next datagram queued after the drops.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := conn.Write(data); err != nil {
			t.Fatal(err)
		}
		drops, samples := sink.get(DropOverload)
		if drops > 0 {
			if received := samples / 20; received+drops > sent+200 || drops >= sent {
				t.Errorf("%d datagrams received and %d counted as dropped, of %d sent and a few more", received, drops, sent)
			}
			t.Logf("%d datagrams received, %d counted as dropped by the kernel", samples/20, drops)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no overload drop counted 5s after %d datagrams into a 64 KiB buffer (%d samples received)", sent, samples)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKernelDropsParse: the control-message reader finds the count among other messages
// and does not read past what the kernel wrote, whatever the header lengths say.
func TestKernelDropsParse(t *testing.T) {
	msg := func(level, typ int32, data []byte) []byte {
		b := make([]byte, unix.CmsgSpace(len(data)))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = level, typ
		h.SetLen(unix.CmsgLen(len(data)))
		copy(b[unix.CmsgLen(0):], data)
		return b
	}
	count := []byte{7, 1, 0, 0} // 263, little-endian
	other := msg(unix.SOL_IP, unix.IP_TTL, []byte{64, 0, 0, 0})
	tests := []struct {
		name string
		oob  []byte
		want uint32
		ok   bool
	}{
		{"alone", msg(unix.SOL_SOCKET, unix.SO_RXQ_OVFL, count), 263, true},
		{"after another", append(other, msg(unix.SOL_SOCKET, unix.SO_RXQ_OVFL, count)...), 263, true},
		{"none", other, 0, false},
		{"empty", nil, 0, false},
		{"short", msg(unix.SOL_SOCKET, unix.SO_RXQ_OVFL, count)[:10], 0, false},
		{"length beyond", func() []byte {
			b := msg(unix.SOL_SOCKET, unix.SO_RXQ_OVFL, count)
			(*unix.Cmsghdr)(unsafe.Pointer(&b[0])).SetLen(1 << 20)
			return b
		}(), 0, false},
		{"length zero", func() []byte {
			b := msg(unix.SOL_SOCKET, unix.SO_RXQ_OVFL, count)
			(*unix.Cmsghdr)(unsafe.Pointer(&b[0])).SetLen(0)
			return b
		}(), 0, false},
	}
	for _, tt := range tests {
		if got, ok := kernelDrops(tt.oob); got != tt.want || ok != tt.ok {
			t.Errorf("%s: got %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
