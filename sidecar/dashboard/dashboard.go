// Package dashboard holds the operator dashboard's static assets, embedded
// in the binary so that the sidecar serves them without a build step or a
// CDN at run time. The sidecar serves them at / on --http-addr, next to the
// JSON they read under /api/ (API.md).
package dashboard

import (
	"embed"
	"io/fs"
)

//go:embed web
var web embed.FS

// Assets is the dashboard's files: index.html at the root.
func Assets() fs.FS {
	sub, err := fs.Sub(web, "web")
	if err != nil {
		panic(err) // the directory is embedded above: it exists
	}
	return sub
}
