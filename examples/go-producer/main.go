// Command go-producer pushes numbered orders into a queue, spread over a few
// partitions, with deterministic transaction ids: run it twice, or run the
// Python or Node producer after it, and the second run is answered
// duplicate, item by item.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

func main() {
	socket := flag.String("socket", "", "sidecar socket (default: $QUEENSIDE_SOCKET or ./.queenside/queenside.sock)")
	queue := flag.String("queue", "orders", "queue to push to")
	count := flag.Int("n", 100, "how many orders")
	customers := flag.Int("customers", 4, "partitions: one per customer")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := queenside.Dial(ctx, *socket)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	items := make([]queenside.PushItem, *count)
	for i := range items {
		items[i], err = queenside.Item(*queue, map[string]any{"order": i, "amount": 10 + i%7})
		if err != nil {
			log.Fatal(err)
		}
		items[i].Partition = fmt.Sprintf("customer-%d", i%*customers)
		// The same id as the Python and Node producers give order i: a retry,
		// or a run of any of them, collapses inside the dedup window.
		items[i].TransactionID = queenside.TransactionID("order", i)
	}
	results, err := c.Push(ctx, items...)
	if err != nil {
		log.Fatal(err)
	}
	counts := map[string]int{}
	for _, r := range results {
		counts[r.Status]++
		if r.Status == protocol.StatusFailed {
			log.Printf("order %d failed: %v", r.Index, r.Error)
		}
	}
	fmt.Printf("pushed %d orders: %v\n", len(results), counts)
}
