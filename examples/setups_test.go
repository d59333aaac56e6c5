// Package examples checks the dev and deployment setups that cannot run
// here (no container engine, no cluster): their files parse, they hold what
// a pod needs, and the commands they give the sidecar work outside a
// container, against a real PostgreSQL.
package examples

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/queenside/queenside/sidecar/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
	} `yaml:"httpGet"`
}

type container struct {
	Name          string   `yaml:"name"`
	Image         string   `yaml:"image"`
	RestartPolicy string   `yaml:"restartPolicy"`
	Args          []string `yaml:"args"`
	Env           []struct {
		Name string `yaml:"name"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	StartupProbe   *probe `yaml:"startupProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
}

type statefulSet struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Template struct {
			Spec struct {
				TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
				InitContainers                []container `yaml:"initContainers"`
				Containers                    []container `yaml:"containers"`
				Volumes                       []struct {
					Name     string    `yaml:"name"`
					EmptyDir *struct{} `yaml:"emptyDir"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

func TestKubernetesPodRunsQueensideAsANativeSidecar(t *testing.T) {
	var ss statefulSet
	readYAML(t, "kubernetes/queenside.yaml", &ss)
	pod := ss.Spec.Template.Spec
	if ss.Kind != "StatefulSet" || len(pod.InitContainers) != 1 || len(pod.Containers) != 1 {
		t.Fatalf("want a StatefulSet with one native sidecar and one app: %+v", ss)
	}
	q, app := pod.InitContainers[0], pod.Containers[0]
	if q.RestartPolicy != "Always" {
		t.Fatalf("the sidecar's restartPolicy is %q: a native sidecar needs Always", q.RestartPolicy)
	}
	if q.ReadinessProbe == nil || q.ReadinessProbe.HTTPGet.Path != "/health" ||
		q.LivenessProbe == nil || q.LivenessProbe.HTTPGet.Path != "/live" ||
		q.StartupProbe == nil || q.StartupProbe.HTTPGet.Path != "/live" {
		t.Fatalf("probes: readiness must be /health, liveness and startup /live: %+v %+v %+v", q.ReadinessProbe, q.LivenessProbe, q.StartupProbe)
	}
	if grace := flagDuration(t, q.Args, "--shutdown-grace"); time.Duration(pod.TerminationGracePeriodSeconds)*time.Second <= grace {
		t.Fatalf("terminationGracePeriodSeconds %d is not above --shutdown-grace %v", pod.TerminationGracePeriodSeconds, grace)
	}
	socketDir := filepath.Dir(flagValue(t, q.Args, "--socket"))
	if mountOf(q, "socket") != socketDir || mountOf(app, "socket") != socketDir {
		t.Fatalf("the socket volume must be mounted at %s in both containers", socketDir)
	}
	emptyDir := false
	for _, v := range pod.Volumes {
		emptyDir = emptyDir || (v.Name == "socket" && v.EmptyDir != nil)
	}
	if !emptyDir {
		t.Fatal("the socket is not on an emptyDir")
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Metadata.Name != "spool" ||
		mountOf(q, "spool") != flagValue(t, q.Args, "--spool-dir") {
		t.Fatal("the spool is not on a volume of its own mounted at --spool-dir")
	}
	env := map[string]bool{}
	for _, e := range q.Env {
		env[e.Name] = true
	}
	if !env["QUEENSIDE_DATABASE_URL"] {
		t.Fatal("the sidecar gets no database URL")
	}
	runOutsideAContainer(t, q.Args, true)
}

func mountOf(c container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

type composeFile struct {
	Services map[string]struct {
		Command     []string       `yaml:"command"`
		Volumes     []string       `yaml:"volumes"`
		Healthcheck map[string]any `yaml:"healthcheck"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		StopGracePeriod string `yaml:"stop_grace_period"`
		Build           struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func TestComposeSetupSharesTheSocketAndKeepsTheSpool(t *testing.T) {
	var cf composeFile
	readYAML(t, "docker-compose.yml", &cf)
	q, ok := cf.Services["queenside"]
	if !ok || cf.Services["postgres"].Healthcheck == nil {
		t.Fatalf("services: %v", cf.Services)
	}
	if test := fmt.Sprint(q.Healthcheck["test"]); !strings.Contains(test, "/health") {
		t.Fatalf("the sidecar's healthcheck does not probe /health: %s", test)
	}
	if grace, err := time.ParseDuration(q.StopGracePeriod); err != nil || grace <= flagDuration(t, q.Command, "--shutdown-grace") {
		t.Fatalf("stop_grace_period %q is not above --shutdown-grace", q.StopGracePeriod)
	}
	if !hasVolume(q.Volumes, "spool:"+flagValue(t, q.Command, "--spool-dir")) || cf.Volumes["spool"] == nil && !hasKey(cf.Volumes, "spool") {
		t.Fatal("the spool is not on a named volume at --spool-dir")
	}
	socketMount := "socket:" + filepath.Dir(flagValue(t, q.Command, "--socket"))
	for _, app := range []string{"python-app", "node-app"} {
		a, ok := cf.Services[app]
		if !ok || !hasVolume(a.Volumes, socketMount) || !hasVolume(q.Volumes, socketMount) {
			t.Fatalf("%s does not share the socket volume %s with the sidecar", app, socketMount)
		}
		if a.DependsOn["queenside"].Condition != "service_healthy" {
			t.Fatalf("%s does not wait for the sidecar to be healthy", app)
		}
	}
	for name, s := range cf.Services {
		if s.Build.Dockerfile == "" {
			continue
		}
		dockerfile := filepath.Join(s.Build.Context, s.Build.Dockerfile)
		if _, err := os.Stat(dockerfile); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// What the image runs must exist in the checkout it is built from
		// (the examples' own tests run them against a real sidecar).
		for _, arg := range dockerCMD(t, dockerfile)[1:] {
			if !strings.HasSuffix(arg, ".py") && !strings.HasSuffix(arg, ".js") {
				continue
			}
			if _, err := os.Stat(filepath.Join(s.Build.Context, arg)); err != nil {
				t.Fatalf("%s runs %s: %v", name, arg, err)
			}
		}
	}
	runOutsideAContainer(t, q.Command, false)
}

func TestDockerfileCommandRuns(t *testing.T) {
	runOutsideAContainer(t, dockerCMD(t, "../sidecar/Dockerfile"), true)
}

// dockerCMD reads a Dockerfile's CMD, which must be in JSON form.
func dockerCMD(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no CMD in %s", path)
	}
	var args []string
	if err := json.Unmarshal(m[1], &args); err != nil || len(args) == 0 {
		t.Fatalf("%s: CMD is not a JSON array: %v", path, err)
	}
	return args
}

func hasVolume(vs []string, want string) bool {
	for _, v := range vs {
		if v == want {
			return true
		}
	}
	return false
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s is not valid YAML for its shape: %v", path, err)
	}
}

func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("no %s in %v", name, args)
	return ""
}

func flagDuration(t *testing.T, args []string, name string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(flagValue(t, args, name))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// runOutsideAContainer runs the sidecar with exactly the given arguments,
// except that paths, addresses and the database point at this machine:
// it must come up, answer /live and /health, and drain on SIGTERM.
func runOutsideAContainer(t *testing.T, args []string, urlFromEnv bool) {
	t.Helper()
	dir := shortDir(t)
	addr := freeAddr(t)
	dbURL := pgtest.NewDatabase(t)
	replace := map[string]string{
		"--socket": filepath.Join(dir, "qs.sock"), "--spool-dir": filepath.Join(dir, "spool"),
		"--http-addr": addr, "--database-url": dbURL,
	}
	var run []string
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(args[i], "=")
		if v, ok := replace[name]; ok {
			run = append(run, name+"="+v)
			if !hasValue {
				i++ // the value was the next argument
			}
			continue
		}
		run = append(run, args[i])
	}
	cmd := exec.Command(buildSidecar(t), run...)
	cmd.Env = os.Environ()
	if urlFromEnv {
		cmd.Env = append(cmd.Env, "QUEENSIDE_DATABASE_URL="+dbURL)
	}
	out, err := os.CreateTemp(dir, "log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("sidecar %v:\n%s", run, b)
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for get(addr, "/health") != http.StatusOK {
		if time.Now().After(deadline) {
			cmd.Process.Kill() //nolint:errcheck
			t.Fatalf("the sidecar run as %v never answered /health 200", run)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := get(addr, "/live"); got != http.StatusOK {
		t.Fatalf("/live: %d", got)
	}
	cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill() //nolint:errcheck
		t.Fatal("no exit within 30 s of SIGTERM")
	}
}

func get(addr, path string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "qsex")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// buildSidecar builds the binary for one test (the build cache makes the
// second and later builds quick).
func buildSidecar(t *testing.T) string {
	t.Helper()
	binary := filepath.Join(shortDir(t), "queenside")
	if out, err := exec.Command("go", "build", "-o", binary, "../sidecar/cmd/queenside").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return binary
}
