package examples

import (
	"archive/tar"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// caBundle is where Go's crypto/x509 finds the CA certificates on Linux.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// TestReleaseImage builds the image `make image` builds and checks it as far
// as this machine can: its configuration, its files, and the binary in it
// run outside the container (no container can be started here).
func TestReleaseImage(t *testing.T) {
	engine := containerEngine(t)
	want := dockerfileConfig(t, releaseDockerfile)
	tag := fmt.Sprintf("localhost/queenside-test:%d", os.Getpid())
	build := exec.Command("make", "--no-print-directory", "-C", "..", "image", "IMAGE="+tag, "IMAGE_LATEST=")
	start := time.Now()
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(engine, "rmi", "-f", tag).Run() }) //nolint:errcheck
	t.Logf("%s in %v", strings.TrimSpace(lastLine(out)), time.Since(start).Round(100*time.Millisecond))

	// The configuration: what an engine would start, as which user, with
	// which volumes and port.
	var inspected []struct {
		Config struct {
			Entrypoint, Cmd []string
			User            string
			Volumes         map[string]struct{}
			ExposedPorts    map[string]struct{}
			Labels          map[string]string
		}
	}
	out, err = exec.Command(engine, "image", "inspect", tag).Output()
	if err != nil || json.Unmarshal(out, &inspected) != nil || len(inspected) != 1 {
		t.Fatalf("%s image inspect %s: %v\n%s", engine, tag, err, out)
	}
	got := inspected[0].Config
	if !slices.Equal(got.Entrypoint, want.Entrypoint) || !slices.Equal(got.Cmd, want.Cmd) {
		t.Fatalf("the image runs %v %v, its Dockerfile says %v %v", got.Entrypoint, got.Cmd, want.Entrypoint, want.Cmd)
	}
	uid, gid, _ := strings.Cut(got.User, ":")
	if got.User != want.User || uid == "" || uid == "0" || strings.Trim(uid+gid, "0123456789") != "" {
		t.Fatalf("the image's user is %q (its Dockerfile says %q): want numeric user:group ids, not root", got.User, want.User)
	}
	if !slices.Equal(sortedKeys(got.Volumes), sorted(want.Volumes)) || !slices.Equal(sortedKeys(got.ExposedPorts), sorted(want.ExposedPorts)) {
		t.Fatalf("the image's volumes %v and ports %v, its Dockerfile's %v and %v", sortedKeys(got.Volumes), sortedKeys(got.ExposedPorts), want.Volumes, want.ExposedPorts)
	}
	if httpPort := flagValue(t, want.Cmd, "--http-addr"); !slices.Contains(want.ExposedPorts, strings.TrimPrefix(httpPort, ":")+"/tcp") {
		t.Fatalf("the image serves HTTP on %s and exposes %v", httpPort, want.ExposedPorts)
	}

	// The files: the static binary, the CA bundle, the volumes' mount points
	// owned by the image's user, and nothing else.
	root, owners := exportImage(t, engine, tag)
	binary := filepath.Join(root, want.Entrypoint[0])
	assertStatic(t, binary)
	pem, err := os.ReadFile(filepath.Join(root, caBundle))
	if err != nil || !x509.NewCertPool().AppendCertsFromPEM(pem) {
		t.Fatalf("no CA certificates at %s in the image: %v", caBundle, err)
	}
	var files []string
	for name, owner := range owners {
		if owner.dir {
			wantOwner := "0:0"
			if slices.Contains(want.Volumes, name) {
				wantOwner = got.User
			}
			if owner.ids != wantOwner {
				t.Fatalf("%s in the image is owned by %s, want %s", name, owner.ids, wantOwner)
			}
		} else {
			files = append(files, name)
		}
	}
	if slices.Sort(files); !slices.Equal(files, sorted([]string{want.Entrypoint[0], caBundle})) {
		t.Fatalf("the image holds %v: want only the binary and the CA bundle", files)
	}

	// The binary in the image, run here.
	out, err = exec.Command(binary, "--version").CombinedOutput()
	if version := inspected[0].Config.Labels["org.opencontainers.image.version"]; err != nil || strings.TrimSpace(string(out)) != "queenside version "+version {
		t.Fatalf("--version: %v: %q, want the image's version %q", err, out, version)
	}
	help, err := exec.Command(binary, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("serve --help: %v\n%s", err, help)
	}
	var compose composeFile
	readYAML(t, "docker-compose.yml", &compose)
	k8sArgs := sidecarContainer(t, &statefulSet(t).Spec.Template.Spec).Args
	for _, args := range [][]string{want.Cmd, compose.Services["queenside"].Command, k8sArgs} {
		for _, a := range args[1:] {
			if name, _, _ := strings.Cut(a, "="); strings.HasPrefix(name, "--") && !strings.Contains(string(help), "\n   "+name+" ") {
				t.Fatalf("the image's serve --help does not list %s, which %v passes", name, args)
			}
		}
	}
	t.Run("command", func(t *testing.T) {
		runSidecar(t, binary, want.Cmd, true, func(socket string) {
			pushOne(t, socket)
		})
	})
	t.Run("compose", func(t *testing.T) { runComposeSidecar(t, binary) })
	t.Run("kubernetes", func(t *testing.T) { runSidecar(t, binary, k8sArgs, true, nil) })
}

// containerEngine is podman, or docker when its daemon answers; without
// either the test says so and skips.
func containerEngine(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("podman"); err == nil {
		return p
	}
	if d, err := exec.LookPath("docker"); err == nil && exec.Command(d, "info").Run() == nil {
		return d
	}
	t.Skip("no container engine to build the image: neither podman nor docker with a running daemon (apt-get install -y podman)")
	return ""
}

type owner struct {
	ids string // "uid:gid"
	dir bool
}

// exportImage creates a container from the image (not started) and unpacks
// its filesystem into a temporary directory; owners has each entry's path
// in the image and its owner.
func exportImage(t *testing.T, engine, image string) (string, map[string]owner) {
	t.Helper()
	out, err := exec.Command(engine, "create", image).Output()
	if err != nil {
		t.Fatalf("%s create %s: %v", engine, image, err)
	}
	id := strings.TrimSpace(string(out))
	defer exec.Command(engine, "rm", "-f", id).Run() //nolint:errcheck
	export := exec.Command(engine, "export", id)
	stdout, err := export.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := export.Start(); err != nil {
		t.Fatal(err)
	}
	root := shortDir(t)
	owners := map[string]owner{}
	tr := tar.NewReader(stdout)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s export: %v", engine, err)
		}
		name := path.Clean("/" + h.Name)
		owners[name] = owner{fmt.Sprintf("%d:%d", h.Uid, h.Gid), h.Typeflag == tar.TypeDir}
		dst := filepath.Join(root, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			err = writeFile(dst, tr, os.FileMode(h.Mode).Perm())
		default:
			t.Fatalf("%s in the image is a %c: want only files and directories", name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := export.Wait(); err != nil {
		t.Fatalf("%s export: %v", engine, err)
	}
	return root, owners
}

func writeFile(dst string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// assertStatic fails unless binary needs no dynamic loader and no shared
// library: an image FROM scratch has neither.
func assertStatic(t *testing.T, binary string) {
	t.Helper()
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatalf("the image's binary: %v", err)
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || len(libs) > 0 {
			t.Fatalf("the image's binary is dynamically linked (libraries %v): it cannot run FROM scratch", libs)
		}
	}
}

// pushOne pushes a message through the Go client: the sidecar must answer
// it queued.
func pushOne(t *testing.T, socket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := queenside.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	item, err := queenside.Item("image-test", map[string]any{"from": "the image's binary"})
	if err != nil {
		t.Fatal(err)
	}
	results, err := c.Push(ctx, item)
	if err != nil || len(results) != 1 || results[0].Status != protocol.StatusQueued {
		t.Fatalf("push: %v %+v, want one result queued", err, results)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func sortedKeys[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
