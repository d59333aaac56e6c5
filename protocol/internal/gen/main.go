// Command gen writes the Python and Node clients' tables of error codes and
// queue options from the Go code (see package clientgen). Run it from
// anywhere in the repository after changing protocol/codes.go or the queue
// options:
//
//	go run ./protocol/internal/gen
//
// (`go generate ./protocol` runs it too.) TestGeneratedClientFiles in
// protocol/ fails until it has been run.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/queenside/queenside/protocol/internal/clientgen"
)

func main() {
	root, err := repoRoot()
	if err == nil {
		var written []string
		written, err = clientgen.Write(root)
		for _, path := range written {
			fmt.Println("wrote", path)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// repoRoot is the nearest directory above the working one with a go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
