package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"
)

func logFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "trace, debug, info, warn or error", EnvVars: []string{"QUEENSIDE_LOG_LEVEL"}},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json", EnvVars: []string{"QUEENSIDE_LOG_FORMAT"}},
	}
}

func newLogger(c *cli.Context) (hclog.Logger, error) {
	level := hclog.LevelFromString(c.String("log-level"))
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", c.String("log-level"))
	}
	format := c.String("log-format")
	if format != "text" && format != "json" {
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "queenside",
		Level:      level,
		JSONFormat: format == "json",
		Output:     os.Stderr,
	}), nil
}
