package examples

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const manifest = "kubernetes/queenside.yaml"

// kinds are the objects a manifest here may hold, as the Kubernetes API's
// own Go types: a kind not listed fails, so one added to the manifest is
// decoded strictly too once it is listed.
var kinds = map[string]func() any{
	"apps/v1/StatefulSet": func() any { return &appsv1.StatefulSet{} },
	"apps/v1/Deployment":  func() any { return &appsv1.Deployment{} },
	"v1/Pod":              func() any { return &corev1.Pod{} },
	"v1/Service":          func() any { return &corev1.Service{} },
	"v1/ConfigMap":        func() any { return &corev1.ConfigMap{} },
	"v1/Secret":           func() any { return &corev1.Secret{} },
}

// decodeManifest decodes every YAML document of a manifest into its typed
// object, strictly: an unknown (say misspelled) or duplicated field is an
// error, as `kubectl apply --validate=strict` would make it.
func decodeManifest(b []byte) ([]any, error) {
	var objects []any
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objects, nil
		}
		if err != nil {
			return nil, err
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if meta.Kind == "" {
			var anything any
			if yaml.Unmarshal(doc, &anything) == nil && anything == nil {
				continue // only comments
			}
			return nil, fmt.Errorf("document %d has no kind", n)
		}
		newObject, ok := kinds[meta.APIVersion+"/"+meta.Kind]
		if !ok {
			return nil, fmt.Errorf("document %d: %s %s is not among the kinds the test decodes", n, meta.APIVersion, meta.Kind)
		}
		obj := newObject()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", n, meta.Kind, err)
		}
		objects = append(objects, obj)
	}
}

// statefulSet is the manifest's one StatefulSet, decoded strictly.
func statefulSet(t *testing.T) *appsv1.StatefulSet {
	t.Helper()
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := decodeManifest(b)
	if err != nil {
		t.Fatalf("%s: %v", manifest, err)
	}
	if len(objects) != 1 {
		t.Fatalf("%s holds %d objects, want one StatefulSet", manifest, len(objects))
	}
	ss, ok := objects[0].(*appsv1.StatefulSet)
	if !ok {
		t.Fatalf("%s holds a %T, want a StatefulSet", manifest, objects[0])
	}
	return ss
}

// sidecarContainer is the pod's queenside container: the init container
// running the image.
func sidecarContainer(t *testing.T, pod *corev1.PodSpec) corev1.Container {
	t.Helper()
	if len(pod.InitContainers) != 1 || len(pod.Containers) == 0 {
		t.Fatalf("want one init container (queenside) and the app's containers: %d and %d", len(pod.InitContainers), len(pod.Containers))
	}
	q := pod.InitContainers[0]
	if !strings.HasPrefix(q.Image, "queenside:") {
		t.Fatalf("the init container runs %q, not the queenside image", q.Image)
	}
	return q
}

func TestKubernetesPodRunsQueensideAsANativeSidecar(t *testing.T) {
	ss := statefulSet(t)
	pod := &ss.Spec.Template.Spec
	q := sidecarContainer(t, pod)
	if q.RestartPolicy == nil || *q.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("the sidecar's restartPolicy is %v: a native sidecar needs Always", q.RestartPolicy)
	}
	_, httpPort, err := net.SplitHostPort(flagValue(t, q.Args, "--http-addr"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", q.ReadinessProbe, "/health"}, {"liveness", q.LivenessProbe, "/live"}, {"startup", q.StartupProbe, "/live"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			t.Fatalf("the %s probe must GET %s: %+v", p.name, p.path, p.probe)
		}
		if port := containerPort(t, q, p.probe.HTTPGet.Port); strconv.Itoa(int(port)) != httpPort {
			t.Fatalf("the %s probe goes to port %d, the sidecar serves HTTP on %s", p.name, port, httpPort)
		}
	}
	grace := flagDuration(t, q.Args, "--shutdown-grace")
	if pod.TerminationGracePeriodSeconds == nil || time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second <= grace {
		t.Fatalf("terminationGracePeriodSeconds %v is not above --shutdown-grace %v", pod.TerminationGracePeriodSeconds, grace)
	}

	socket := flagValue(t, q.Args, "--socket")
	socketVolume := volumeAt(q, filepath.Dir(socket))
	emptyDir := false
	for _, v := range pod.Volumes {
		emptyDir = emptyDir || (v.Name == socketVolume && v.EmptyDir != nil)
	}
	if socketVolume == "" || !emptyDir {
		t.Fatalf("the socket's directory %s is not on an emptyDir volume of the pod", filepath.Dir(socket))
	}
	for _, app := range pod.Containers {
		if volumeAt(app, filepath.Dir(socket)) != socketVolume {
			t.Fatalf("the app %s does not mount the socket volume %s at %s", app.Name, socketVolume, filepath.Dir(socket))
		}
		if env := envValue(app, "QUEENSIDE_SOCKET"); env != socket {
			t.Fatalf("the app %s has QUEENSIDE_SOCKET=%q, the sidecar serves %s", app.Name, env, socket)
		}
	}
	spoolVolume := volumeAt(q, flagValue(t, q.Args, "--spool-dir"))
	if len(ss.Spec.VolumeClaimTemplates) != 1 || spoolVolume == "" || ss.Spec.VolumeClaimTemplates[0].Name != spoolVolume {
		t.Fatal("the spool is not on a volume claim of its own mounted at --spool-dir")
	}
	db := false
	for _, e := range q.Env {
		db = db || (e.Name == "QUEENSIDE_DATABASE_URL" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil)
	}
	if !db {
		t.Fatal("the sidecar gets no database URL from a secret")
	}
	runOutsideAContainer(t, q.Args, true)
}

// The pod runs the image as the image expects: as its user, with the
// image's volumes mounted and its port declared.
func TestKubernetesPodAgreesWithTheImage(t *testing.T) {
	image := dockerfileConfig(t, releaseDockerfile)
	pod := &statefulSet(t).Spec.Template.Spec
	q := sidecarContainer(t, pod)
	uid, gid, _ := strings.Cut(image.User, ":")
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil || sc.FSGroup == nil ||
		strconv.FormatInt(*sc.RunAsUser, 10) != uid || strconv.FormatInt(*sc.RunAsGroup, 10) != gid ||
		strconv.FormatInt(*sc.FSGroup, 10) != gid {
		t.Fatalf("the pod must run as the image's user %s with fsGroup %s (its volumes writable): %+v", image.User, gid, sc)
	}
	for _, v := range image.Volumes {
		if volumeAt(q, v) == "" {
			t.Fatalf("the image's volume %s is not mounted in the sidecar", v)
		}
	}
	var ports []string
	for _, p := range q.Ports {
		ports = append(ports, fmt.Sprintf("%d/%s", p.ContainerPort, strings.ToLower(string(orTCP(p.Protocol)))))
	}
	if strings.Join(ports, " ") != strings.Join(image.ExposedPorts, " ") {
		t.Fatalf("the sidecar declares ports %v, the image exposes %v", ports, image.ExposedPorts)
	}
	if q.Command != nil {
		t.Fatalf("the sidecar overrides the image's entrypoint with %v", q.Command)
	}
}

// Strictness proved: the manifest with one field misspelled fails to decode,
// naming the field.
func TestKubernetesManifestWithAMisspelledFieldFails(t *testing.T) {
	good, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	// Each starts a line (after its indentation), so no comment is what changes.
	for _, typo := range [][2]string{
		{"\n          restartPolicy: Always", "\n          restartPolicey: Always"},
		{"\n          readinessProbe:", "\n          readinesProbe:"},
		{"\n            periodSeconds: 10", "\n            periodSecond: 10"},
	} {
		bad := bytes.Replace(good, []byte(typo[0]), []byte(typo[1]), 1)
		if bytes.Equal(bad, good) {
			t.Fatalf("%s has no %q to misspell", manifest, typo[0])
		}
		field, _, _ := strings.Cut(strings.TrimSpace(typo[1]), ":")
		if _, err := decodeManifest(bad); err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("with %q misspelled %q the manifest decodes: %v", typo[0], field, err)
		}
	}
}

func containerPort(t *testing.T, c corev1.Container, port intstr.IntOrString) int32 {
	t.Helper()
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort
		}
	}
	t.Fatalf("%s declares no port named %q", c.Name, port.StrVal)
	return 0
}

func volumeAt(c corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.Name
		}
	}
	return ""
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func orTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}
