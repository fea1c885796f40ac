package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hotkeyd/hotkeyd/config"
	"go.yaml.in/yaml/v3"
)

// loadConfig loads a hotkeyd config file the way `hotkeyd serve --config` does, with env
// as the whole environment.
func loadConfig(t *testing.T, path string, env map[string]string) config.Config {
	t.Helper()
	c, err := config.Load(config.LoadOptions{File: path, Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

func TestExampleConfig(t *testing.T) {
	c := loadConfig(t, "hotkeyd.yaml", nil)
	if !loopback(t, c.HTTP.Listen) || !loopback(t, c.UDP.Listen) || !loopback(t, c.Proxy.Listen) {
		t.Errorf("http %q, udp %q, proxy %q; want loopback addresses in the example", c.HTTP.Listen, c.UDP.Listen, c.Proxy.Listen)
	}
	if c.Auth.Token != "" {
		t.Error("the example config holds a token; want it in HOTKEYD_AUTH_TOKEN")
	}
	if c.Monitor.Addr != "" {
		t.Error("the production example uses MONITOR, which roughly halves Redis's throughput")
	}
}

func loopback(t *testing.T, addr string) bool {
	t.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%q: %v", addr, err)
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// defaultPort is the port of the agent's default HTTP address.
func defaultPort(t *testing.T) int {
	t.Helper()
	_, p, err := net.SplitHostPort(config.Default().HTTP.Listen)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Kubernetes objects, as far as the test reads them.
type (
	object struct {
		APIVersion string            `yaml:"apiVersion"`
		Kind       string            `yaml:"kind"`
		Metadata   meta              `yaml:"metadata"`
		Data       map[string]string `yaml:"data"`
		Spec       struct {
			Template struct {
				Metadata meta    `yaml:"metadata"`
				Spec     podSpec `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	meta struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	}
	podSpec struct {
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name      string `yaml:"name"`
			ConfigMap struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
			EmptyDir *struct{} `yaml:"emptyDir"`
		} `yaml:"volumes"`
	}
	container struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Env   []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				SecretKeyRef *struct {
					Name string `yaml:"name"`
					Key  string `yaml:"key"`
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
			Protocol      string `yaml:"protocol"`
		} `yaml:"ports"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			RunAsNonRoot             bool  `yaml:"runAsNonRoot"`
			ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"` // a number or a port name
		} `yaml:"httpGet"`
	}
)

func readObjects(t *testing.T, path string) []object {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []object
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(out)+1, err)
		}
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Errorf("%s: document %d: apiVersion %q, kind %q, name %q; want all three", path, len(out)+1, o.APIVersion, o.Kind, o.Metadata.Name)
		}
		out = append(out, o)
	}
	return out
}

func TestKubernetesSidecar(t *testing.T) {
	objs := readObjects(t, "kubernetes/sidecar.yaml")
	byKind := map[string]object{}
	for _, o := range objs {
		byKind[o.Kind] = o
	}
	dep, ok := byKind["Deployment"]
	if !ok {
		t.Fatal("no Deployment")
	}
	pod := dep.Spec.Template.Spec
	var hk *container
	for i := range pod.Containers {
		if pod.Containers[i].Name == "hotkeyd" {
			hk = &pod.Containers[i]
		}
	}
	if hk == nil || len(pod.Containers) < 2 {
		t.Fatalf("containers %v; want the app and a container named hotkeyd", pod.Containers)
	}

	// The agent's configuration: the ConfigMap's file, mounted where --config points,
	// with the container's environment.
	i := slices.Index(hk.Args, "--config")
	if len(hk.Args) == 0 || hk.Args[0] != "serve" || i < 0 || i+1 >= len(hk.Args) {
		t.Fatalf("args %q; want serve --config FILE", hk.Args)
	}
	cfgPath := hk.Args[i+1]
	var cmName string
	for _, vm := range hk.VolumeMounts {
		if filepath.Dir(cfgPath) == vm.MountPath {
			for _, v := range pod.Volumes {
				if v.Name == vm.Name {
					cmName = v.ConfigMap.Name
				}
			}
		}
	}
	cm := byKind["ConfigMap"]
	file, ok := cm.Data[filepath.Base(cfgPath)]
	if cmName == "" || cm.Metadata.Name != cmName || !ok {
		t.Fatalf("--config %s: no ConfigMap mounted there with key %s", cfgPath, filepath.Base(cfgPath))
	}
	env := map[string]string{}
	for _, e := range hk.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret-from-" + e.ValueFrom.SecretKeyRef.Name
		default:
			env[e.Name] = e.Value
		}
		if !strings.HasPrefix(e.Name, "HOTKEYD_") {
			t.Errorf("env %s: not a hotkeyd setting", e.Name)
		}
	}
	tmp := filepath.Join(t.TempDir(), "hotkeyd.yaml")
	if err := os.WriteFile(tmp, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	c := loadConfig(t, tmp, env)
	if c.Auth.Token == "" {
		t.Error("no auth.token: the HTTP port is reachable from the pod network, so changes must need the token")
	}
	if !loopback(t, c.UDP.Listen) {
		t.Errorf("udp.listen %q; want loopback: only the app in the pod reports", c.UDP.Listen)
	}
	_, portStr, err := net.SplitHostPort(c.HTTP.Listen)
	if err != nil {
		t.Fatal(err)
	}
	httpPort, _ := strconv.Atoi(portStr)
	if httpPort != defaultPort(t) {
		t.Errorf("http.listen port %d; want the agent's default %d", httpPort, defaultPort(t))
	}
	if loopback(t, c.HTTP.Listen) {
		t.Errorf("http.listen %q: the kubelet's probes cannot reach loopback", c.HTTP.Listen)
	}

	// Probes: the agent's paths, on its HTTP port.
	ports := map[string]int{}
	for _, p := range hk.Ports {
		if p.Protocol == "TCP" || p.Protocol == "" {
			ports[p.Name] = p.ContainerPort
		}
	}
	for _, pr := range []struct {
		name string
		p    *probe
		path string
	}{{"readinessProbe", hk.ReadinessProbe, "/readyz"}, {"livenessProbe", hk.LivenessProbe, "/healthz"}} {
		if pr.p == nil {
			t.Errorf("no %s", pr.name)
			continue
		}
		port := 0
		switch v := pr.p.HTTPGet.Port.(type) {
		case int:
			port = v
		case string:
			port = ports[v]
		}
		if pr.p.HTTPGet.Path != pr.path || port != httpPort {
			t.Errorf("%s: GET %s on port %v (%d); want %s on %d", pr.name, pr.p.HTTPGet.Path, pr.p.HTTPGet.Port, port, pr.path, httpPort)
		}
	}
	if a := dep.Spec.Template.Metadata.Annotations; a["prometheus.io/port"] != strconv.Itoa(httpPort) || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v; want port %d and path /metrics", a, httpPort)
	}

	// Resources from docs/BENCHMARKS.md: 44-46 MiB resident with 10M keys; request 64 MiB.
	if r := hk.Resources.Requests["memory"]; r != "64Mi" {
		t.Errorf("memory request %q; want 64Mi", r)
	}
	if l, r := mib(t, hk.Resources.Limits["memory"]), mib(t, hk.Resources.Requests["memory"]); l < r {
		t.Errorf("memory limit %d MiB below the request %d MiB", l, r)
	}
	if hk.Resources.Requests["cpu"] == "" {
		t.Error("no cpu request")
	}
	sc := hk.SecurityContext
	if !sc.RunAsNonRoot || !sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("securityContext %+v; want runAsNonRoot, readOnlyRootFilesystem and allowPrivilegeEscalation false", sc)
	}
	if _, ok := byKind["NetworkPolicy"]; !ok {
		t.Error("no NetworkPolicy guarding the agent's port")
	}

	// The registry file is written (when Redis is unreachable at start it is the store of
	// POST /v1/registry): with a read-only root file system it must lie on a writable
	// volume, or be "" (memory only).
	if f := c.Registry.File; f != "" {
		writable := false
		for _, vm := range hk.VolumeMounts {
			for _, v := range pod.Volumes {
				if v.Name == vm.Name && v.EmptyDir != nil && filepath.IsAbs(f) && filepath.Dir(f) == vm.MountPath {
					writable = true
				}
			}
		}
		if !writable {
			t.Errorf("registry.file %q: not on a writable volume (readOnlyRootFilesystem); mount an emptyDir at its directory or set it to \"\"", f)
		}
	}
}

func mib(t *testing.T, q string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSuffix(q, "Mi"))
	if err != nil || !strings.HasSuffix(q, "Mi") {
		t.Errorf("quantity %q; want N Mi", q)
	}
	return n
}

// unit reads a systemd unit's key=value settings by section; keys may repeat.
func unit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: %q: want key=value in a section", path, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestSystemdUnit(t *testing.T) {
	const path = "systemd/hotkeyd.service"
	u := unit(t, path)
	svc := u["Service"]
	if got := svc["ExecStart"]; len(got) != 1 || got[0] != "/usr/local/bin/hotkeyd serve --config /etc/hotkeyd/hotkeyd.yaml" {
		t.Errorf("ExecStart %q; want /usr/local/bin/hotkeyd serve --config /etc/hotkeyd/hotkeyd.yaml", got)
	}
	for k, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "", "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"MemoryDenyWriteExecute": "yes", "ProtectKernelTunables": "yes", "Restart": "on-failure",
	} {
		if got := svc[k]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s=%q; want %q", k, got, want)
		}
	}
	// ProtectSystem=strict makes every path read-only but the unit's StateDirectory
	// (/var/lib/NAME): the registry file of deploy/hotkeyd.yaml, which POST /v1/registry
	// writes, must lie there.
	c := loadConfig(t, "hotkeyd.yaml", nil)
	if sd := svc["StateDirectory"]; c.Registry.File != "" && (len(sd) != 1 || filepath.Dir(c.Registry.File) != "/var/lib/"+sd[0]) {
		t.Errorf("registry.file %q with StateDirectory=%q: the file is not writable under ProtectSystem=strict; want it in /var/lib/<StateDirectory>", c.Registry.File, sd)
	}
	if got := u["Install"]["WantedBy"]; len(got) != 1 || got[0] != "multi-user.target" {
		t.Errorf("[Install] WantedBy=%q; want multi-user.target", got)
	}

	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the unit was parsed but not verified by systemd")
	}
	// systemd-analyze verify wants ExecStart to exist: point it at this test binary.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "hotkeyd.service")
	if err := os.WriteFile(tmp, bytes.ReplaceAll(b, []byte("/usr/local/bin/hotkeyd"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", tmp).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := exec.Command(sa, "security", "--offline=true", tmp).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for hotkeyd.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: no exposure level in\n%s", out)
	}
	if x, _ := strconv.ParseFloat(string(m[1]), 64); x > 2 {
		t.Errorf("systemd-analyze security: exposure %.1f; want at most 2 (OK)\n%s", x, out)
	}
}
