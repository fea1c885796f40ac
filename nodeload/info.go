package nodeload

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Reading is one INFO reading of a node: counters since the node started.
type Reading struct {
	// At is when the reading was taken.
	At time.Time
	// Commands is total_commands_processed.
	Commands uint64
	// CPUSeconds is used_cpu_sys + used_cpu_user: the process's CPU time, I/O threads
	// and background threads included.
	CPUSeconds float64
	// MainThreadCPUSeconds is used_cpu_sys_main_thread + used_cpu_user_main_thread (Redis
	// 6.2 and later): the CPU time of the thread that runs commands, the one that
	// saturates. 0 when MainThread is false.
	MainThreadCPUSeconds float64
	MainThread           bool
	// NetInputBytes and NetOutputBytes are total_net_input_bytes and
	// total_net_output_bytes (replication traffic included).
	NetInputBytes, NetOutputBytes uint64
	// Uptime is uptime_in_seconds: a smaller value than the last reading's means the node
	// restarted and its counters began again.
	Uptime uint64
}

// infoFields are the INFO fields a Reading needs; optionalFields those it takes when
// present.
var (
	infoFields = []string{"total_commands_processed", "used_cpu_sys", "used_cpu_user",
		"total_net_input_bytes", "total_net_output_bytes", "uptime_in_seconds"}
	optionalFields = []string{"used_cpu_sys_main_thread", "used_cpu_user_main_thread"}
	allFields      = slices.Concat(infoFields, optionalFields)
)

// maxInfoBytes bounds the INFO text parsed; a few KiB is usual for the sections asked.
const maxInfoBytes = 1 << 20

// ParseInfo reads the fields of a Reading from INFO text ("field:value" lines, "#"
// section headers, CRLF or LF line ends), taken at at. It fails, naming the field, when
// one is missing, appears twice with different values, or is not a number of its kind.
// Unknown fields are ignored.
func ParseInfo(text string, at time.Time) (Reading, error) {
	if len(text) > maxInfoBytes {
		return Reading{}, fmt.Errorf("nodeload: INFO reply of %d bytes: at most %d are read", len(text), maxInfoBytes)
	}
	vals := make(map[string]string, len(infoFields))
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, f := range allFields {
			if name != f {
				continue
			}
			if old, dup := vals[f]; dup && old != val {
				return Reading{}, fmt.Errorf("nodeload: INFO field %s given twice (%q, %q)", f, old, val)
			}
			vals[f] = val
		}
	}
	r := Reading{At: at}
	var err error
	whole := func(f string) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		if v, err = strconv.ParseUint(vals[f], 10, 64); err != nil {
			err = fieldError(f, vals[f], "a whole number ≥ 0")
		}
		return v
	}
	seconds := func(f string) float64 {
		if err != nil {
			return 0
		}
		v, perr := strconv.ParseFloat(vals[f], 64)
		if perr != nil || !(v >= 0 && v <= 1e15) { // NaN too
			err = fieldError(f, vals[f], "a number of seconds ≥ 0")
		}
		return v
	}
	for _, f := range infoFields {
		if _, ok := vals[f]; !ok {
			return Reading{}, fmt.Errorf("nodeload: INFO lacks %s (is this Redis?)", f)
		}
	}
	r.Commands = whole("total_commands_processed")
	r.CPUSeconds = seconds("used_cpu_sys") + seconds("used_cpu_user")
	r.NetInputBytes = whole("total_net_input_bytes")
	r.NetOutputBytes = whole("total_net_output_bytes")
	r.Uptime = whole("uptime_in_seconds")
	_, sys := vals["used_cpu_sys_main_thread"]
	_, user := vals["used_cpu_user_main_thread"]
	if sys && user {
		r.MainThreadCPUSeconds = seconds("used_cpu_sys_main_thread") + seconds("used_cpu_user_main_thread")
		r.MainThread = true
	}
	if err != nil {
		return Reading{}, err
	}
	return r, nil
}

func fieldError(field, val, want string) error {
	if len(val) > 40 {
		val = val[:40] + "…"
	}
	return fmt.Errorf("nodeload: INFO field %s is %q; want %s", field, val, want)
}

// Load is a node's load between two readings.
type Load struct {
	// At is the later reading's time; Span the time between the two.
	At   time.Time
	Span time.Duration
	// CommandsPerSecond is the commands the node ran per second.
	CommandsPerSecond float64
	// CPU is the CPU time per second of the thread that runs commands (the main thread),
	// or of the whole process when INFO does not give the main thread's (before Redis
	// 6.2): 1 is that thread always busy, the primary saturated.
	CPU float64
	// ProcessCPU is the whole process's CPU time per second, I/O threads included: with
	// io-threads it can pass 1 while the command thread has room.
	ProcessCPU float64
	// NetInputBytesPerSecond and NetOutputBytesPerSecond are the bytes it read and wrote
	// per second.
	NetInputBytesPerSecond, NetOutputBytesPerSecond float64
}

// Between returns the load from prev to cur, and false when there is none to give: the
// readings are not in time order, or the node restarted between them (its uptime went
// back or a counter fell).
func Between(prev, cur Reading) (Load, bool) {
	span := cur.At.Sub(prev.At)
	if span <= 0 || cur.Uptime < prev.Uptime || cur.Commands < prev.Commands || cur.CPUSeconds < prev.CPUSeconds ||
		cur.MainThreadCPUSeconds < prev.MainThreadCPUSeconds || cur.NetInputBytes < prev.NetInputBytes || cur.NetOutputBytes < prev.NetOutputBytes {
		return Load{}, false
	}
	s := span.Seconds()
	l := Load{
		At:                      cur.At,
		Span:                    span,
		CommandsPerSecond:       float64(cur.Commands-prev.Commands) / s,
		ProcessCPU:              (cur.CPUSeconds - prev.CPUSeconds) / s,
		NetInputBytesPerSecond:  float64(cur.NetInputBytes-prev.NetInputBytes) / s,
		NetOutputBytesPerSecond: float64(cur.NetOutputBytes-prev.NetOutputBytes) / s,
	}
	l.CPU = l.ProcessCPU
	if prev.MainThread && cur.MainThread {
		l.CPU = (cur.MainThreadCPUSeconds - prev.MainThreadCPUSeconds) / s
	}
	return l, true
}
