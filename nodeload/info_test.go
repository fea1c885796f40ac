package nodeload

import (
	"strings"
	"testing"
	"time"
)

// sampleInfo is the part of a Redis 7.0 INFO reply that a Reading needs, with fields
// around them, as Redis writes it (CRLF, section headers).
const sampleInfo = "# Server\r\nredis_version:7.0.15\r\nuptime_in_seconds:3600\r\n\r\n" +
	"# Stats\r\ntotal_connections_received:12\r\ntotal_commands_processed:123456\r\ninstantaneous_ops_per_sec:7\r\n" +
	"total_net_input_bytes:99000\r\ntotal_net_output_bytes:88000\r\n\r\n" +
	"# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\n"

func TestParseInfo(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r, err := ParseInfo(sampleInfo, at)
	if err != nil {
		t.Fatal(err)
	}
	want := Reading{At: at, Commands: 123456, CPUSeconds: 3.75, NetInputBytes: 99000, NetOutputBytes: 88000, Uptime: 3600}
	if r != want {
		t.Errorf("ParseInfo = %+v; want %+v", r, want)
	}
	if lf, err := ParseInfo(strings.ReplaceAll(sampleInfo, "\r\n", "\n"), at); err != nil || lf != want {
		t.Errorf("with LF line ends: %+v, %v; want %+v", lf, err, want)
	}
	for _, tc := range []struct{ name, text, wantErr string }{
		{"missing", strings.Replace(sampleInfo, "total_commands_processed", "x", 1), "INFO lacks total_commands_processed"},
		{"negative", strings.Replace(sampleInfo, "total_net_input_bytes:99000", "total_net_input_bytes:-1", 1), `INFO field total_net_input_bytes is "-1"; want a whole number ≥ 0`},
		{"not a number", strings.Replace(sampleInfo, "used_cpu_user:2.250000", "used_cpu_user:lots", 1), `INFO field used_cpu_user is "lots"; want a number of seconds ≥ 0`},
		{"NaN", strings.Replace(sampleInfo, "used_cpu_sys:1.500000", "used_cpu_sys:NaN", 1), `INFO field used_cpu_sys is "NaN"`},
		{"twice", sampleInfo + "uptime_in_seconds:1\r\n", `INFO field uptime_in_seconds given twice ("3600", "1")`},
		{"not INFO", "-ERR unknown command", "INFO lacks"},
		{"huge", strings.Repeat("x", maxInfoBytes+1), "at most 1048576 are read"},
	} {
		if _, err := ParseInfo(tc.text, at); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, tc.wantErr)
		}
	}
	// Redis 6.2 and later give the main thread's CPU too; the load's CPU is then its.
	withMain := sampleInfo + "used_cpu_sys_main_thread:1.000000\r\nused_cpu_user_main_thread:0.500000\r\n"
	m, err := ParseInfo(withMain, at)
	if err != nil || !m.MainThread || m.MainThreadCPUSeconds != 1.5 || m.CPUSeconds != 3.75 {
		t.Errorf("with the main thread's CPU: %+v, %v; want MainThreadCPUSeconds 1.5 beside CPUSeconds 3.75", m, err)
	}
	if _, err := ParseInfo(withMain+"used_cpu_user_main_thread:x\r\n", at); err == nil {
		t.Error("a main-thread field given twice, the second not a number: no error")
	}
	// The same value twice (INFO asked per section can repeat a field) is no conflict.
	if _, err := ParseInfo(sampleInfo+sampleInfo, at); err != nil {
		t.Errorf("a field repeated with its value: %v; want no error", err)
	}
}

func TestBetween(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	prev := Reading{At: t0, Commands: 1000, CPUSeconds: 10, NetInputBytes: 5000, NetOutputBytes: 7000, Uptime: 100}
	cur := Reading{At: t0.Add(2 * time.Second), Commands: 201000, CPUSeconds: 11.5, NetInputBytes: 25000, NetOutputBytes: 8000, Uptime: 102}
	l, ok := Between(prev, cur)
	want := Load{At: cur.At, Span: 2 * time.Second, CommandsPerSecond: 100000, CPU: 0.75, ProcessCPU: 0.75, NetInputBytesPerSecond: 10000, NetOutputBytesPerSecond: 500}
	if !ok || l != want {
		t.Errorf("Between = %+v, %v; want %+v", l, ok, want)
	}
	// With io-threads the process uses more CPU than the command thread; CPU is the
	// command thread's when both readings have it.
	pm, cm := prev, cur
	pm.MainThread, pm.MainThreadCPUSeconds = true, 4
	cm.MainThread, cm.MainThreadCPUSeconds = true, 4.5
	if l, ok := Between(pm, cm); !ok || l.CPU != 0.25 || l.ProcessCPU != 0.75 {
		t.Errorf("Between with the main thread's CPU = %+v, %v; want CPU 0.25, ProcessCPU 0.75", l, ok)
	}
	if l, _ := Between(prev, cm); l.CPU != 0.75 {
		t.Errorf("Between with the main thread's CPU in one reading only: CPU %v; want the process's 0.75", l.CPU)
	}
	restarted := cur
	restarted.Uptime, restarted.Commands = 1, 50
	for name, c := range map[string]Reading{"restart": restarted, "same time": {At: t0, Uptime: 100, Commands: 1000, CPUSeconds: 10, NetInputBytes: 5000, NetOutputBytes: 7000}} {
		if l, ok := Between(prev, c); ok {
			t.Errorf("%s: Between = %+v, true; want no load", name, l)
		}
	}
}

func FuzzParseInfo(f *testing.F) {
	f.Add(sampleInfo)
	f.Add("")
	f.Add("total_commands_processed:1\nused_cpu_sys:1e300\n")
	f.Add(strings.Replace(sampleInfo, "3600", "18446744073709551616", 1))
	f.Fuzz(func(t *testing.T, text string) {
		r, err := ParseInfo(text, time.Time{})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "nodeload: INFO") {
				t.Fatalf("error %q does not say it is about INFO", err)
			}
			return
		}
		if !(r.CPUSeconds >= 0) || r.CPUSeconds > 2e15 {
			t.Fatalf("CPUSeconds %v from %q", r.CPUSeconds, text)
		}
	})
}
