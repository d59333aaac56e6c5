package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

func pushCommand() *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "push messages: the --payload, or each line of standard input",
		ArgsUsage: " ",
		Flags: append(clientFlags(),
			&cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Required: true, Usage: "queue name"},
			&cli.StringFlag{Name: "partition", Aliases: []string{"p"}, Value: protocol.DefaultPartition, Usage: "partition name"},
			&cli.StringFlag{Name: "payload", Usage: "the message (else one message per line of standard input)"},
			&cli.StringFlag{Name: "encoding", Value: "json", Usage: "how to read a payload: json (a JSON value) or string (the text as is)"},
			&cli.StringFlag{Name: "transaction-id", Usage: "transaction id of the one message (deduplicates retries)"},
			&cli.StringFlag{Name: "transaction-id-prefix", Usage: "for standard input: line N gets transaction id PREFIX-N"},
			&cli.IntFlag{Name: "batch", Value: 100, Usage: "messages per request when reading standard input"},
		),
		Action: runPush,
	}
}

func runPush(c *cli.Context) error {
	enc := c.String("encoding")
	if enc != "json" && enc != "string" {
		return exitError("--encoding %q: want json or string", enc)
	}
	batch := c.Int("batch")
	if batch < 1 || batch > protocol.MaxPushItems {
		return exitError("--batch %d: want 1..%d", batch, protocol.MaxPushItems)
	}
	var lines []string
	if c.IsSet("payload") {
		lines = []string{c.String("payload")}
	} else {
		var err error
		if lines, err = readLines(os.Stdin); err != nil {
			return exitError("read standard input: %v", err)
		}
	}
	if len(lines) == 0 {
		return exitError("nothing to push: give --payload or lines on standard input")
	}
	if c.IsSet("transaction-id") && len(lines) > 1 {
		return exitError("--transaction-id names one message; use --transaction-id-prefix for many")
	}
	items := make([]protocol.PushItem, len(lines))
	for i, line := range lines {
		payload, err := encodePayload(line, enc)
		if err != nil {
			return exitError("line %d: %v", i+1, err)
		}
		items[i] = protocol.PushItem{Queue: c.String("queue"), Partition: c.String("partition"), Payload: payload}
		switch {
		case c.IsSet("transaction-id"):
			items[i].TransactionID = c.String("transaction-id")
		case c.IsSet("transaction-id-prefix"):
			items[i].TransactionID = c.String("transaction-id-prefix") + "-" + strconv.Itoa(i+1)
		}
	}
	cl, ctx, done, err := connect(c)
	if err != nil {
		return exitError("%v", err)
	}
	defer done()
	// The sidecar's frame limit bounds a message, and how many go in a
	// request.
	hello, err := cl.Hello(ctx, "queenside-cli")
	if err != nil {
		return exitError("hello: %v", err)
	}
	requests, err := requestsOf(items, batch, hello.MaxFrameBytes)
	if err != nil {
		return exitError("%v", err)
	}
	var results []protocol.PushResult
	start := 0
	for _, req := range requests {
		res, err := cl.Push(ctx, req...)
		if err != nil {
			return exitError("push: %v", err)
		}
		for i := range res {
			res[i].Index += start
		}
		results = append(results, res...)
		start += len(req)
	}
	if c.Bool("json") {
		if err := printJSON(protocol.PushReply{Results: results}); err != nil {
			return err
		}
	} else {
		printPushResults(results)
	}
	for _, r := range results {
		if r.Status == protocol.StatusFailed {
			return cli.Exit("", 1)
		}
	}
	return nil
}

func encodePayload(text, encoding string) ([]byte, error) {
	if encoding == "string" {
		return queenside.Payload(text)
	}
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return nil, fmt.Errorf("not JSON (%v); use --encoding string for plain text", err)
	}
	return queenside.Payload(v)
}

// maxLine is the longest line read, the largest frame a sidecar takes
// (its --max-frame-bytes at most 1 GiB): whether a message fits the
// sidecar's own limit is told once it said it (requestsOf).
const maxLine = 1 << 30

// readLines reads the lines of r, skipping empty ones.
func readLines(r io.Reader) ([]string, error) {
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	n := 0
	for sc.Scan() {
		n++
		if sc.Text() != "" {
			lines = append(lines, sc.Text())
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return nil, fmt.Errorf("line %d is longer than %d bytes, more than any sidecar takes in a frame", n+1, maxLine)
	}
	return lines, sc.Err()
}

// frameSlack is what a request's envelope adds to its items: its id, op,
// timeout and the keys around the items.
const frameSlack = 256

// requestsOf splits items into push requests of at most batch items, each
// of which fits in the sidecar's frame limit. An item that cannot fit
// alone is refused, naming it, the limit and the flag that raises it.
func requestsOf(items []protocol.PushItem, batch, limit int) ([][]protocol.PushItem, error) {
	var requests [][]protocol.PushItem
	from, size := 0, frameSlack
	for i, it := range items {
		b, err := protocol.Marshal(it)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if len(b)+frameSlack > limit {
			return nil, fmt.Errorf("line %d: a message of %d bytes does not fit in the sidecar's frame limit of %d bytes: raise the sidecar's --max-frame-bytes, or push a smaller message", i+1, len(b), limit)
		}
		if i-from == batch || size+len(b) > limit {
			requests = append(requests, items[from:i])
			from, size = i, frameSlack
		}
		size += len(b)
	}
	return append(requests, items[from:]), nil
}

func printPushResults(results []protocol.PushResult) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSTATUS\tQUEUE/PARTITION\tOFFSET\tMESSAGE ID\tTRANSACTION ID\tERROR")
	for _, r := range results {
		off, errText := "-", ""
		if r.Offset != nil {
			off = strconv.FormatInt(*r.Offset, 10)
		}
		if r.Error != nil {
			errText = r.Error.Error()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s/%s\t%s\t%s\t%s\t%s\n", r.Index, r.Status, r.Queue, r.Partition, off, r.MessageID, r.TransactionID, errText)
	}
	tw.Flush()
}
