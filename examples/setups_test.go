// Package examples checks the dev and deployment setups that cannot run
// here (no container can be started, no cluster runs): their files parse,
// they hold what a pod needs, and the commands they give the sidecar work
// outside a container, against a real PostgreSQL, also with the binary
// taken out of the built image (image_test.go).
package examples

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/queenside/queenside/sidecar/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

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
	healthcheck := composeHealthcheck(t, q.Healthcheck)
	if healthcheck[0] != dockerfileConfig(t, releaseDockerfile).Entrypoint[0] || healthcheck[1] != "health" ||
		flagValue(t, healthcheck, "--socket") != flagValue(t, q.Command, "--socket") {
		t.Fatalf("the sidecar's healthcheck must be the image's binary asking `health` on the socket it serves: %v", healthcheck)
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
	runComposeSidecar(t, buildSidecar(t))
}

// runComposeSidecar runs binary as compose runs the sidecar, and while it
// serves, runs its healthcheck with the same binary: it must pass.
func runComposeSidecar(t *testing.T, binary string) {
	t.Helper()
	var cf composeFile
	readYAML(t, "docker-compose.yml", &cf)
	q := cf.Services["queenside"]
	healthcheck := composeHealthcheck(t, q.Healthcheck)
	runSidecar(t, binary, q.Command, false, func(socket string) {
		args := replaceFlags(healthcheck[1:], map[string]string{"--socket": socket})
		if out, err := exec.Command(binary, args...).CombinedOutput(); err != nil {
			t.Fatalf("the healthcheck %v failed on a healthy sidecar: %v\n%s", args, err, out)
		}
	})
}

// composeHealthcheck is a healthcheck's command, which must be in exec form
// ("CMD", then the arguments): the image has no shell for CMD-SHELL.
func composeHealthcheck(t *testing.T, hc map[string]any) []string {
	t.Helper()
	test, _ := hc["test"].([]any)
	if len(test) < 3 || test[0] != "CMD" {
		t.Fatalf("the healthcheck is not [\"CMD\", binary, args...]: %v", hc["test"])
	}
	var args []string
	for _, a := range test[1:] {
		args = append(args, fmt.Sprint(a))
	}
	return args
}

// The image's command, as its Dockerfile gives it, serves against a real
// PostgreSQL (examples/image_test.go runs it again from inside the image).
func TestDockerfileCommandRuns(t *testing.T) {
	runOutsideAContainer(t, dockerCMD(t, releaseDockerfile), true)
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

// runOutsideAContainer runs the sidecar built from this checkout with exactly
// the given arguments, except that paths, addresses and the database point at
// this machine: it must come up, answer /live and /health, and drain on
// SIGTERM.
func runOutsideAContainer(t *testing.T, args []string, urlFromEnv bool) {
	t.Helper()
	runSidecar(t, buildSidecar(t), args, urlFromEnv, nil)
}

// runSidecar runs binary as runOutsideAContainer describes; while it serves
// (healthy), while gets the socket's path.
func runSidecar(t *testing.T, binary string, args []string, urlFromEnv bool, while func(socket string)) {
	t.Helper()
	dir := shortDir(t)
	addr := freeAddr(t)
	dbURL := pgtest.NewDatabase(t)
	socket := filepath.Join(dir, "qs.sock")
	run := replaceFlags(args, map[string]string{
		"--socket": socket, "--spool-dir": filepath.Join(dir, "spool"),
		"--http-addr": addr, "--database-url": dbURL,
	})
	cmd := exec.Command(binary, run...)
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
		select {
		case err := <-exited:
			t.Fatalf("the sidecar run as %v exited before it was healthy: %v", run, err)
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill() //nolint:errcheck
			t.Fatalf("the sidecar run as %v never answered /health 200", run)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := get(addr, "/live"); got != http.StatusOK {
		t.Fatalf("/live: %d", got)
	}
	if while != nil {
		func() {
			// A t.Fatal in while must not leave the sidecar running.
			defer func() {
				if t.Failed() {
					cmd.Process.Kill() //nolint:errcheck
				}
			}()
			while(socket)
		}()
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

// replaceFlags gives the named flags new values, whether they were written
// --name=value or --name value; other arguments are kept as they are.
func replaceFlags(args []string, replace map[string]string) []string {
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
	return run
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
