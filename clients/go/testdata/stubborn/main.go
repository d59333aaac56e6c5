// Command stubborn consumes the queue its argument names with Consume's
// defaults, at $QUEENSIDE_SOCKET, writing "handling <offset>" for the
// message it takes, whose handler never returns: a first SIGINT asks
// Consume to stop, which cannot end the process; a second one must.
package main

import (
	"context"
	"fmt"
	"os"

	queenside "github.com/queenside/queenside/clients/go"
)

func main() {
	ctx := context.Background()
	c, err := queenside.Dial(ctx, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, err = c.Consume(ctx, os.Args[1], func(_ context.Context, m queenside.Message) error {
		fmt.Printf("handling %d\n", m.Offset)
		select {} // the message in hand never finishes
	}, queenside.ConsumeOptions{})
	fmt.Fprintln(os.Stderr, "Consume returned:", err)
	os.Exit(1)
}
