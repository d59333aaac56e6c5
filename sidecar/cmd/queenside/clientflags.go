package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/vmihailenco/msgpack/v5"

	queenside "github.com/queenside/queenside/clients/go"
)

func clientFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "socket", Usage: "sidecar socket (default: $QUEENSIDE_SOCKET, else ./" + queenside.DevSocket + " when it exists, else " + queenside.DefaultSocket + ")"},
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON, for scripts"},
		&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up after this long (a command that works in batches: on a batch)"},
	}
}

// connect dials the sidecar and returns a context bounded by --timeout.
func connect(c *cli.Context) (*queenside.Client, context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	cl, err := queenside.Dial(ctx, c.String("socket")) // "" follows queenside.SocketPath
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return cl, ctx, func() { cl.Close(); cancel() }, nil
}

// perCall bounds one call of a command that works in batches by --timeout,
// so that neither the whole run nor a question asked on the way is.
func perCall(c *cli.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Context, c.Duration("timeout"))
}

// printJSON prints a result with the protocol's own field names: it goes
// through msgpack, so the keys are exactly those on the wire.
func printJSON(v any) error {
	raw, err := msgpack.Marshal(v)
	if err != nil {
		return err
	}
	var generic any
	if err := msgpack.Unmarshal(raw, &generic); err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(generic)
}

// exitError makes the command exit non-zero with a message.
func exitError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), 1)
}
