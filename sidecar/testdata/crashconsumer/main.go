// Command crashconsumer consumes a queue with the Go client's Consume loop
// and writes "<offset>" to standard output for each message it handles,
// until a message whose payload is the string "poison": then it writes
// "poison <offset>" and hangs, holding its lease, so that the test can
// kill it mid-batch as a crash would.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	queenside "github.com/queenside/queenside/clients/go"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: crashconsumer SOCKET QUEUE GROUP")
		os.Exit(2)
	}
	ctx := context.Background()
	c, err := queenside.Dial(ctx, os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, err = c.Consume(ctx, os.Args[2], func(_ context.Context, m queenside.Message) error {
		var s string
		if msgpack.Unmarshal(m.Payload, &s) == nil && s == "poison" {
			fmt.Printf("poison %d\n", m.Offset)
			time.Sleep(time.Hour) // killed here
		}
		fmt.Printf("%d\n", m.Offset)
		return nil
	}, queenside.ConsumeOptions{Group: os.Args[3], Batch: 10, WaitMs: 500})
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
