package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The dashboard of `queenside dev` can write: dev keeps an admin token in
// its directory, readable by its user alone, and prints a link that signs
// the browser in with it (the token rides in the link's fragment, which no
// browser sends to a server; the page keeps it for the tab and takes it out
// of the address bar). `serve` keeps its rule: no token file, no writes.

const devTokenFile = "admin-token"

// devAdminToken returns the path of dir's admin token file and its token,
// making one on the first run; later runs keep it, so that a link opened
// before still works.
func devAdminToken(dir string) (path, token string, err error) {
	path = filepath.Join(dir, devTokenFile)
	if b, err := os.ReadFile(path); err == nil {
		_, token, _ = strings.Cut(strings.TrimSpace(string(b)), ":")
		if token != "" {
			return path, token, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", "", err
	}
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return "", "", err
	}
	token = hex.EncodeToString(secret)
	body := "# queenside dev's admin token: the dashboard's writes (queenside dev prints a link that signs in with it)\ndev:" + token + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return "", "", fmt.Errorf("write the dev admin token: %w", err)
	}
	return path, token, nil
}
