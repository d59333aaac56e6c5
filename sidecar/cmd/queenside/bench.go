package main

import (
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/queenside/queenside/sidecar/bench"
)

// benchCommand maps flags onto bench.Config; the defaults are the
// package's, so flags and library cannot drift apart.
func benchCommand() *cli.Command {
	d := bench.DefaultConfig()
	return &cli.Command{
		Name:  "bench",
		Usage: "measure throughput, latency, CPU and memory; starts its own PostgreSQL and sidecar unless given them",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "database-url", Usage: "use this database instead of starting PostgreSQL"},
			&cli.StringFlag{Name: "socket", Usage: "use the sidecar on this socket instead of starting one"},
			&cli.IntFlag{Name: "sidecar-pid", Usage: "process id of the sidecar given by --socket, to read its CPU and memory"},
			&cli.StringFlag{Name: "sidecar-binary", Usage: "binary to run as the sidecar (default: this one)"},
			&cli.StringFlag{Name: "out", Value: d.Out, Usage: "write the results as JSON here (empty: none)"},
			&cli.StringFlag{Name: "scenarios", Value: strings.Join(d.Scenarios, ","), Usage: "comma-separated scenarios to run"},
			&cli.IntFlag{Name: "messages", Value: d.Messages, Usage: "messages of push and partitions, and the backlog of popack and autoack"},
			&cli.IntFlag{Name: "payload-bytes", Value: d.PayloadBytes, Usage: "payload size (at least 8: the push time)"},
			&cli.IntFlag{Name: "batch", Value: d.Batch, Usage: "items per push request"},
			&cli.IntFlag{Name: "partitions", Value: d.Partitions, Usage: "partitions of push and of the backlogs"},
			&cli.IntFlag{Name: "connections", Value: d.Connections, Usage: "connections of push, popack, autoack, partitions and fanout"},
			&cli.IntFlag{Name: "inflight", Value: d.Inflight, Usage: "requests each worker connection keeps in flight"},
			&cli.IntFlag{Name: "pop-batch", Value: d.PopBatch, Usage: "messages per pop"},
			&cli.IntFlag{Name: "pop-partitions", Value: d.PopPartitions, Usage: "partitions per pop of popack, autoack and fanout"},
			&cli.DurationFlag{Name: "mixed-duration", Value: d.MixedDuration, Usage: "how long mixed runs"},
			&cli.IntFlag{Name: "mixed-rate", Value: d.MixedRate, Usage: "messages/s the mixed producers push together (0: full speed)"},
			&cli.IntFlag{Name: "mixed-partitions", Value: d.MixedPartitions, Usage: "partitions of mixed"},
			&cli.IntFlag{Name: "mixed-producers", Value: d.MixedProducers, Usage: "producer connections of mixed"},
			&cli.IntFlag{Name: "mixed-consumers", Value: d.MixedConsumers, Usage: "consumer connections of mixed"},
			&cli.IntFlag{Name: "mixed-pop-partitions", Value: d.MixedPopPartitions, Usage: "partitions per pop of mixed"},
			&cli.IntFlag{Name: "mixed-wait-ms", Value: d.MixedWaitMs, Usage: "long-poll wait of the mixed consumers"},
			&cli.StringFlag{Name: "consumer", Value: d.Consumer, Usage: "consumers of mixed and curve: loop (the Go client's Consume with its defaults) or pop (pops of --pop-batch from up to --mixed-pop-partitions partitions, acks carried by the next pop)"},
			&cli.StringFlag{Name: "consumer-command", Usage: "run this program as each consumer of mixed and curve instead (sidecar/bench/apps: the Python and Node clients' consume loops)"},
			&cli.IntFlag{Name: "consume-concurrency", Usage: "concurrency of the consume loops (0: their default)"},
			&cli.DurationFlag{Name: "handler-wait", Usage: "how long the consumers' handler waits a message, standing for its I/O"},
			&cli.StringFlag{Name: "curve-rates", Value: joinInts(d.CurveRates), Usage: "comma-separated offered rates (messages/s) of curve"},
			&cli.DurationFlag{Name: "curve-duration", Value: d.CurveDuration, Usage: "how long curve runs each rate"},
			&cli.StringFlag{Name: "pgmq-sql", Usage: "pgmq's pgmq-extension/sql/pgmq.sql, which the pgmq scenario loads into a database of its own to run curve's traffic through pgmq"},
			&cli.DurationFlag{Name: "idle-duration", Value: d.IdleDuration, Usage: "how long idle watches consumers long-polling an empty queue"},
			&cli.IntFlag{Name: "latency-requests", Value: d.LatencyRequests, Usage: "single-message pushes of latency"},
			&cli.IntFlag{Name: "scale-partitions", Value: d.ScalePartitions, Usage: "partitions of the partitions scenario"},
			&cli.IntFlag{Name: "fanout-groups", Value: d.FanoutGroups, Usage: "consumer groups of fanout"},
			&cli.IntFlag{Name: "fanout-messages", Value: d.FanoutMessages, Usage: "backlog each fanout group consumes"},
			&cli.IntFlag{Name: "held-messages", Value: d.HeldMessages, Usage: "backlog the held scenario drains twice"},
			&cli.IntFlag{Name: "held-partitions", Value: d.HeldPartitions, Usage: "partitions of held's backlog"},
			&cli.IntFlag{Name: "held-back", Value: d.HeldBack, Usage: "partitions whose head held's second drain finds leased and never acked"},
			&cli.DurationFlag{Name: "floor-duration", Value: d.FloorDuration, Usage: "how long floor runs"},
			&cli.DurationFlag{Name: "writes-quiet", Value: d.WritesQuiet, Usage: "how long PostgreSQL's write counters must hold still before they are read, around push, partitions, mixed and each curve rate (a backend publishes its counts up to 10 s late when the counters are busy); 0: no write counts"},
			&cli.IntFlag{Name: "floor-partitions", Value: d.FloorPartitions, Usage: "partitions of floor"},
			&cli.IntFlag{Name: "floor-transaction-messages", Value: d.FloorTransactionMessages, Usage: "messages of each floor push transaction"},
			&cli.IntFlag{Name: "floor-lease-messages", Value: d.FloorLeaseMessages, Usage: "messages a floor lease covers (0: no cursor writes)"},
			&cli.IntFlag{Name: "floor-lease-partitions", Value: d.FloorLeasePartitions, Usage: "cursors each floor lease or ack statement writes"},
			&cli.DurationFlag{Name: "stall-timeout", Value: d.StallTimeout, Usage: "fail a consuming scenario that receives nothing for this long"},
			&cli.DurationFlag{Name: "soak-duration", Value: d.SoakDuration, Usage: "how long soak runs"},
			&cli.IntFlag{Name: "soak-rate", Value: d.SoakRate, Usage: "messages/s the soak producers push together"},
			&cli.IntFlag{Name: "soak-partitions", Value: d.SoakPartitions, Usage: "partitions of soak"},
			&cli.DurationFlag{Name: "soak-sample", Value: d.SoakSample, Usage: "time between two looks at the tables"},
			&cli.DurationFlag{Name: "soak-warmup", Usage: "time the tables get to settle (default 2m, or a third of --soak-duration)"},
			&cli.IntFlag{Name: "soak-completed-retention", Value: d.SoakCompletedRetention, Usage: "completedRetentionSeconds of the soak queue"},
			&cli.BoolFlag{Name: "encrypt", Usage: "run the sidecar with an encryption key and the scenarios' queues with encryptPayloads: every payload sealed on push, opened on pop"},
			&cli.BoolFlag{Name: "tracing", Usage: "run the sidecar with OpenTelemetry tracing on, exporting to a discarding OTLP receiver in the bench, and a trace context on every push"},
			&cli.DurationFlag{Name: "retention-interval", Usage: "--retention-interval of the sidecar the bench starts (default serve's, 1s when soak runs; negative: no janitor)"},
		}, logFlags()...),
		Action: runBench,
	}
}

func runBench(c *cli.Context) error {
	tuneGC()
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	var scenarios []string
	for s := range strings.SplitSeq(c.String("scenarios"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			scenarios = append(scenarios, s)
		}
	}
	rates, err := splitInts(c.String("curve-rates"))
	if err != nil {
		return exitError("bench: --curve-rates: %v", err)
	}
	cfg := bench.Config{
		DatabaseURL:              c.String("database-url"),
		Socket:                   c.String("socket"),
		SidecarPID:               c.Int("sidecar-pid"),
		SidecarBinary:            c.String("sidecar-binary"),
		Out:                      c.String("out"),
		Scenarios:                scenarios,
		Messages:                 c.Int("messages"),
		PayloadBytes:             c.Int("payload-bytes"),
		Batch:                    c.Int("batch"),
		Partitions:               c.Int("partitions"),
		Connections:              c.Int("connections"),
		Inflight:                 c.Int("inflight"),
		PopBatch:                 c.Int("pop-batch"),
		PopPartitions:            c.Int("pop-partitions"),
		MixedDuration:            c.Duration("mixed-duration"),
		MixedRate:                c.Int("mixed-rate"),
		MixedPartitions:          c.Int("mixed-partitions"),
		MixedProducers:           c.Int("mixed-producers"),
		MixedConsumers:           c.Int("mixed-consumers"),
		MixedPopPartitions:       c.Int("mixed-pop-partitions"),
		Consumer:                 c.String("consumer"),
		ConsumerCommand:          c.String("consumer-command"),
		ConsumeConcurrency:       c.Int("consume-concurrency"),
		HandlerWait:              c.Duration("handler-wait"),
		MixedWaitMs:              c.Int("mixed-wait-ms"),
		CurveRates:               rates,
		CurveDuration:            c.Duration("curve-duration"),
		PgmqSQL:                  c.String("pgmq-sql"),
		IdleDuration:             c.Duration("idle-duration"),
		LatencyRequests:          c.Int("latency-requests"),
		ScalePartitions:          c.Int("scale-partitions"),
		FanoutGroups:             c.Int("fanout-groups"),
		FanoutMessages:           c.Int("fanout-messages"),
		HeldMessages:             c.Int("held-messages"),
		HeldPartitions:           c.Int("held-partitions"),
		HeldBack:                 c.Int("held-back"),
		FloorDuration:            c.Duration("floor-duration"),
		WritesQuiet:              c.Duration("writes-quiet"),
		FloorPartitions:          c.Int("floor-partitions"),
		FloorTransactionMessages: c.Int("floor-transaction-messages"),
		FloorLeaseMessages:       c.Int("floor-lease-messages"),
		FloorLeasePartitions:     c.Int("floor-lease-partitions"),
		StallTimeout:             c.Duration("stall-timeout"),
		SoakDuration:             c.Duration("soak-duration"),
		SoakRate:                 c.Int("soak-rate"),
		SoakPartitions:           c.Int("soak-partitions"),
		SoakSample:               c.Duration("soak-sample"),
		SoakWarmup:               c.Duration("soak-warmup"),
		SoakCompletedRetention:   c.Int("soak-completed-retention"),
		RetentionInterval:        c.Duration("retention-interval"),
		Tracing:                  c.Bool("tracing"),
		Encrypt:                  c.Bool("encrypt"),
		Logger:                   log,
	}
	ctx, stop := signalContext()
	defer stop()
	if _, err := bench.Run(ctx, cfg); err != nil {
		return exitError("bench: %v", err)
	}
	return nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func splitInts(s string) ([]int, error) {
	var xs []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		x, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
	}
	return xs, nil
}
