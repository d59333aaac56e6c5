package examples

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// releaseDockerfile is the image `make image` builds; what it declares
// (entrypoint, command, user, volumes, port) is read from it, not repeated.
const releaseDockerfile = "../sidecar/release.Dockerfile"

// instruction is one instruction of a Dockerfile: its keyword, upper-cased,
// and the rest of it, continuation lines joined.
type instruction struct{ Cmd, Args string }

// finalStage reads a Dockerfile's last stage, from its FROM on.
func finalStage(t *testing.T, path string) []instruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var all []instruction
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if more, ok := strings.CutSuffix(text, `\`); ok {
			line += more + " "
			continue
		}
		line += text
		cmd, args, _ := strings.Cut(line, " ")
		all = append(all, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		line = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	last := -1
	for i, in := range all {
		if in.Cmd == "FROM" {
			last = i
		}
	}
	if last < 0 {
		t.Fatalf("%s has no FROM", path)
	}
	return all[last:]
}

// imageConfig is what a Dockerfile's final stage sets in the image's
// configuration, as `podman image inspect` shows it.
type imageConfig struct {
	Entrypoint, Cmd []string
	User            string
	Volumes         []string
	ExposedPorts    []string // "8080/tcp"
}

func dockerfileConfig(t *testing.T, path string) imageConfig {
	t.Helper()
	var c imageConfig
	for _, in := range finalStage(t, path) {
		switch in.Cmd {
		case "ENTRYPOINT":
			c.Entrypoint = jsonArray(t, path, in)
		case "CMD":
			c.Cmd = jsonArray(t, path, in)
		case "USER":
			c.User = in.Args
		case "VOLUME":
			c.Volumes = append(c.Volumes, jsonArray(t, path, in)...)
		case "EXPOSE":
			for _, p := range strings.Fields(in.Args) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				c.ExposedPorts = append(c.ExposedPorts, p)
			}
		}
	}
	return c
}

// jsonArray reads an instruction in exec (JSON) form: the shell form would
// need a shell, which an image FROM scratch does not have.
func jsonArray(t *testing.T, path string, in instruction) []string {
	t.Helper()
	var args []string
	if err := json.Unmarshal([]byte(in.Args), &args); err != nil || len(args) == 0 {
		t.Fatalf("%s: %s %s is not a JSON array: %v", path, in.Cmd, in.Args, err)
	}
	return args
}

// dockerCMD reads a Dockerfile's CMD, which must be in JSON form.
func dockerCMD(t *testing.T, path string) []string {
	t.Helper()
	cmd := dockerfileConfig(t, path).Cmd
	if cmd == nil {
		t.Fatalf("no CMD in %s", path)
	}
	return cmd
}

// The image built from source and the release image are one image built two
// ways: their final stages must say the same, except where COPY takes its
// files from (a build stage, or the context `make image` stages).
func TestDockerfilesFinalStagesAgree(t *testing.T) {
	normalized := func(path string) []string {
		var out []string
		for _, in := range finalStage(t, path) {
			line := in.Cmd + " " + in.Args
			if in.Cmd == "COPY" {
				var keep []string
				fields := strings.Fields(in.Args)
				for _, f := range fields[:len(fields)-1] {
					if strings.HasPrefix(f, "--") && !strings.HasPrefix(f, "--from=") {
						keep = append(keep, f)
					}
				}
				line = "COPY " + strings.Join(append(keep, fields[len(fields)-1]), " ")
			}
			out = append(out, line)
		}
		return out
	}
	release, source := normalized(releaseDockerfile), normalized("../sidecar/Dockerfile")
	if strings.Join(release, "\n") != strings.Join(source, "\n") {
		t.Fatalf("the final stages differ:\n%s:\n  %s\nsidecar/Dockerfile:\n  %s",
			releaseDockerfile, strings.Join(release, "\n  "), strings.Join(source, "\n  "))
	}
	if release[0] != "FROM scratch" {
		t.Fatalf("the release image is %s, not FROM scratch: building it would pull a base image", release[0])
	}
}
