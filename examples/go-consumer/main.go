// Command go-consumer consumes a queue as one consumer group, doing
// idempotent work keyed by each message's transaction id, until Ctrl-C
// (or SIGTERM): Consume then finishes the order in hand, acks what
// completed and releases the rest.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"

	queenside "github.com/queenside/queenside/clients/go"
)

func main() {
	socket := flag.String("socket", "", "sidecar socket (default: $QUEENSIDE_SOCKET or ./.queenside/queenside.sock)")
	queue := flag.String("queue", "orders", "queue to consume")
	group := flag.String("group", "billing", "consumer group")
	flag.Parse()

	ctx := context.Background()
	c, err := queenside.Dial(ctx, *socket)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A redelivered message (after a crash or a lease expiry) must not be
	// billed twice: the transaction id survives redelivery, so key on it.
	// A real worker keeps this set where its results live.
	billed := map[string]bool{}
	stats, err := c.Consume(ctx, *queue, func(_ context.Context, m queenside.Message) error {
		if billed[m.TransactionID] {
			return nil
		}
		var order struct {
			Order  int `msgpack:"order"`
			Amount int `msgpack:"amount"`
		}
		if err := m.Decode(&order); err != nil {
			return err // logged, retried after a backoff: counts against the retry budget
		}
		billed[m.TransactionID] = true
		fmt.Printf("%s offset %d: billed order %d for %d\n", m.Partition, m.Offset, order.Order, order.Amount)
		return nil
	}, queenside.ConsumeOptions{Group: *group, Batch: 20, Partitions: 4})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stopped after billing %d orders (%d handled, %d failures)\n", len(billed), stats.Completed, stats.Failed)
}
