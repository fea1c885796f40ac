package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotkeyd/hotkeyd/config"
	"github.com/hotkeyd/hotkeyd/internal/logbuf"
	"github.com/spf13/pflag"
)

// TestServeJSONLogWithRedisDown: with log.format json every line hotkeyd writes is JSON,
// go-redis's own complaints about a Redis that does not answer too.
func TestServeJSONLogWithRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs hotkeyd for 3 s")
	}
	dead := freeAddr(t) // nothing listens there
	log := &logbuf.Buffer{}
	cmd := exec.Command(hotkeydBinary(t), "serve", "--http-listen", "127.0.0.1:0", "--udp-listen", "127.0.0.1:0", "--redis-addrs", dead,
		"--log-level", "debug")
	cmd.Env = append(os.Environ(), "HOTKEYD_LOG_FORMAT=json")
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	eventually(t, "hotkeyd to start", func() bool { return strings.Contains(log.String(), `"msg":"hotkeyd agent started"`) })
	time.Sleep(3 * time.Second) // go-redis retries every half second
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("hotkeyd serve after SIGTERM: %v; want exit status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hotkeyd serve still runs 30 s after SIGTERM")
	}
	out := log.String()
	for line := range strings.Lines(out) {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line is not JSON: %q", line)
		}
	}
	if !strings.Contains(out, `"component":"go-redis"`) {
		t.Errorf("log at debug level lacks go-redis's lines, with component go-redis:\n%s", out)
	}
}

// TestServeSIGHUP: SIGHUP (a reload to many operators, a closed terminal) does not stop
// hotkeyd serve: it logs that it ignores it and goes on serving; SIGTERM then stops it
// with status 0.
func TestServeSIGHUP(t *testing.T) {
	agent := startServe(t, nil, "--http-listen", "127.0.0.1:0", "--udp-listen", "127.0.0.1:0")
	addr := startedRE.FindStringSubmatch(agent.log.String())[1]
	if err := agent.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a log line about SIGHUP", func() bool { return strings.Contains(agent.log.String(), "SIGHUP ignored") })
	select {
	case <-agent.exited:
		t.Fatalf("hotkeyd serve exited after SIGHUP: %v\n%s", agent.err, agent.log)
	default:
	}
	if _, err := httpGet("http://" + addr + "/healthz"); err != nil {
		t.Errorf("/healthz after SIGHUP: %v; want 200", err)
	}
	log := agent.log.String()
	if !regexp.MustCompile(`level=WARN msg="SIGHUP ignored: [^"]*does not reload its configuration[^"]*restart`).MatchString(log) {
		t.Errorf("log:\n%s\nwant a WARN line that SIGHUP is ignored, as hotkeyd does not reload its configuration: restart it", log)
	}
	if err := agent.signal(t, syscall.SIGTERM); err != nil {
		t.Errorf("hotkeyd serve after SIGHUP, then SIGTERM: %v; want exit status 0\n%s", err, agent.log)
	}
}

// TestWarnUnauthenticated: an HTTP API or a UDP listener reachable from the network
// without auth.token lets anyone change the registry and the overrides or feed samples:
// hotkeyd warns about each at start; on loopback, or with a token, it says nothing.
func TestWarnUnauthenticated(t *testing.T) {
	tests := []struct {
		http, udp, token string
		want             []string // keys named in WARN lines
	}{
		{"127.0.0.1:9736", "127.0.0.1:9736", "", nil},
		{"localhost:9736", "[::1]:9736", "", nil},
		{"127.0.0.5:9736", "", "", nil},
		{":9736", ":9736", "", []string{"http.listen", "udp.listen"}},
		{"0.0.0.0:9736", "127.0.0.1:9736", "", []string{"http.listen"}},
		{"[::]:9736", "10.0.0.5:9736", "", []string{"http.listen", "udp.listen"}},
		{"10.0.0.5:9736", "", "", []string{"http.listen"}},
		{"agent.internal:9736", "127.0.0.1:9736", "", []string{"http.listen"}},
		{":9736", ":9736", "s3cret", nil},
	}
	for _, tt := range tests {
		t.Run(tt.http+","+tt.udp, func(t *testing.T) {
			cfg := config.Default()
			cfg.HTTP.Listen, cfg.UDP.Listen, cfg.Auth.Token = tt.http, tt.udp, tt.token
			var buf bytes.Buffer
			warnUnauthenticated(cfg, slog.New(slog.NewTextHandler(&buf, nil)))
			var got []string
			for line := range strings.Lines(buf.String()) {
				if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "HOTKEYD_AUTH_TOKEN") {
					t.Errorf("line %q: want a WARN naming HOTKEYD_AUTH_TOKEN", line)
				}
				for _, key := range []string{"http.listen", "udp.listen"} {
					if strings.Contains(line, "msg=\""+key) {
						got = append(got, key)
					}
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("warned about %q; want %q\n%s", got, tt.want, buf.String())
			}
		})
	}
}

// TestRegistryAddrWithoutScheme: --addr without http:// is told as top tells it, not as
// a Go URL error.
func TestRegistryAddrWithoutScheme(t *testing.T) {
	for _, sub := range []string{"list", "add"} {
		_, _, err := runCmd(t, context.Background(), "registry", sub, "--addr", "127.0.0.1:7420")
		want := `--addr "127.0.0.1:7420": want a URL such as http://127.0.0.1:9736`
		if err == nil || err.Error() != want {
			t.Errorf("registry %s: got %v; want %q", sub, err, want)
		}
	}
}

// TestServeLogsFiles: hotkeyd serve logs the config file it read (or none) and the
// registry file as an absolute path, so that two agents sharing one are seen.
func TestServeLogsFiles(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "hotkeyd.yaml")
	if err := os.WriteFile(cfgFile, []byte("log:\n  level: info\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := startServe(t, nil, "--http-listen", "127.0.0.1:0", "--udp-listen", "127.0.0.1:0", "--config", cfgFile)
	abs, err := filepath.Abs(filepath.Join(agent.cmd.Dir, "hotkeyd-registry.json"))
	if err != nil {
		t.Fatal(err)
	}
	log := agent.log.String()
	for _, want := range []string{"level=INFO", "config_file=" + cfgFile, "registry_file=" + abs} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	agent = startServe(t, []string{"HOTKEYD_REGISTRY_FILE="}, "--http-listen", "127.0.0.1:0", "--udp-listen", "127.0.0.1:0")
	for _, want := range []string{"config_file=none", `registry_file="none`} {
		if !strings.Contains(agent.log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, agent.log)
		}
	}
}

// TestRegistrySubcommandHelp: each subcommand's --help shows its own flags, not add's.
func TestRegistrySubcommandHelp(t *testing.T) {
	addOnly := []string{"--file", "--pattern", "--start", "--expected-read-rate", "--note"}
	for _, sub := range []string{"list", "show", "rm", "add"} {
		out, _, err := runCmd(t, context.Background(), "registry", sub, "--help")
		if err != nil && !errors.Is(err, pflag.ErrHelp) {
			t.Errorf("registry %s --help: %v", sub, err)
		}
		_, help, _ := strings.Cut(out, "\nFlags:\n") // the usage above names add's flags too
		if !strings.Contains(help, "--addr") {
			t.Errorf("registry %s --help lacks --addr:\n%s", sub, help)
		}
		for _, flag := range addOnly {
			if shown := strings.Contains(help, flag); shown != (sub == "add") {
				t.Errorf("registry %s --help: shows %s = %v; want %v\n%s", sub, flag, shown, sub == "add", help)
			}
		}
	}
}
