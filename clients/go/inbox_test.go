package queenside_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/sidecar"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// The inbox under SIGKILL: a consumer process that writes each message's
// effect and acks it in one transaction, killed at random points (itself
// before the commit, itself right after it, from outside at a random
// time) and started again until everything is done. Every effect must be
// applied once, and nothing acked delivered again; once with AckTx and
// once with queenside.ack_message in plain SQL.

// inboxChildEnv, set, makes the test binary the consumer (see TestMain):
// it holds the consumer's settings, space-separated key=value pairs.
const inboxChildEnv = "QUEENSIDE_TEST_INBOX_CONSUMER"

const inboxMessages = 50

func TestInboxUnderSIGKILLAppliesEveryEffectOnce(t *testing.T) {
	for _, mode := range []string{"AckTx", "sql"} {
		t.Run(mode, func(t *testing.T) {
			seed := rand.Uint64()
			if s, err := strconv.ParseUint(os.Getenv("QUEENSIDE_TEST_SEED"), 10, 64); err == nil {
				seed = s
			}
			rng := rand.New(rand.NewPCG(seed, 0))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			dbURL := pgtest.NewDatabase(t)
			socket := serveOn(t, dbURL, sidecar.Options{})
			c := dial(t, socket)
			conn, err := pgx.Connect(ctx, dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, `CREATE TABLE effects (key text PRIMARY KEY, partition text, msg_offset bigint)`); err != nil {
				t.Fatal(err)
			}
			var items []queenside.PushItem
			for n := range inboxMessages {
				it, err := queenside.Item("inbox", n)
				if err != nil {
					t.Fatal(err)
				}
				it.Partition, it.TransactionID = fmt.Sprint("p", n%2), fmt.Sprint("crash-", n)
				items = append(items, it)
			}
			if _, err := c.Push(ctx, items...); err != nil {
				t.Fatal(err)
			}

			runs := []string{"before-commit", "after-commit", "outside", "before-commit", "after-commit", "outside"}
			rng.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
			var log []string
			for _, run := range append(runs, "to the end") {
				settings := fmt.Sprintf("socket=%s db=%s mode=%s", socket, dbURL, mode)
				if run == "before-commit" || run == "after-commit" {
					settings += fmt.Sprintf(" die-after=%d die-at=%s", 1+rng.IntN(4), run)
				}
				cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), inboxChildEnv+"="+settings)
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = cmd.Stdout
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				if run == "outside" {
					time.AfterFunc(time.Duration(300+rng.IntN(700))*time.Millisecond, func() { cmd.Process.Kill() }) //nolint:errcheck
				}
				var last string
				for lines := bufio.NewScanner(out); lines.Scan(); {
					last = lines.Text()
					if strings.HasPrefix(last, "REDELIVERED") || strings.HasPrefix(last, "LOST") {
						t.Fatalf("seed %d, run %q: %s", seed, run, last)
					}
				}
				err = cmd.Wait()
				var exit *exec.ExitError
				killed := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
				var effects int
				if err := conn.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&effects); err != nil {
					t.Fatal(err)
				}
				log = append(log, fmt.Sprintf("%s: %d effects", run, effects))
				if run == "to the end" {
					if err != nil || last != fmt.Sprint("done: ", inboxMessages) {
						t.Fatalf("seed %d: the last run ended with %v, %q (%v)", seed, err, last, log)
					}
				} else if err != nil && !killed {
					t.Fatalf("seed %d, run %q: %v, last said %q", seed, run, err, last)
				}
			}
			// Everything acked, nothing left to deliver.
			res, err := c.Pop(ctx, queenside.PopArgs{Queue: "inbox", Group: "inbox", Batch: 100, Partitions: 2})
			if err != nil || len(res.Messages) != 0 {
				t.Fatalf("after the runs: %d messages popped, %v", len(res.Messages), err)
			}
			t.Logf("seed %d: %s", seed, strings.Join(log, "; "))
		})
	}
}

// inboxConsumer is the consumer the test starts: it pops through the
// sidecar and, for each message, writes its effect and acks it in one
// transaction. The effect's primary key is the message's transaction id:
// a message delivered again once its effect (and so its ack) committed
// fails that insert, which it reports (REDELIVERED, exit 3); every message
// acked while an effect is missing is reported as LOST (exit 4). It exits
// 0 once every message has its effect; die-after and die-at make it
// SIGKILL itself after that many messages, before or right after a
// commit.
func inboxConsumer(settings string) int {
	cfg := map[string]string{}
	for _, kv := range strings.Fields(settings) {
		k, v, _ := strings.Cut(kv, "=")
		cfg[k] = v
	}
	dieAfter, _ := strconv.Atoi(cfg["die-after"])
	ctx := context.Background()
	c, err := queenside.Dial(ctx, cfg["socket"])
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	conn, err := pgx.Connect(ctx, cfg["db"])
	if err != nil {
		fmt.Println("connect:", err)
		return 1
	}
	ack := func(tx pgx.Tx, m queenside.Message) (bool, error) {
		if cfg["mode"] == "AckTx" {
			r, err := queenside.AckTx(ctx, tx, m.Completed())
			return err == nil && r.Results[0].Success, err
		}
		var success bool
		err := tx.QueryRow(ctx, `SELECT success FROM queenside.ack_message($1, $2)`, m.LeaseID, m.Offset).Scan(&success)
		return success, err
	}
	effects := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil {
			fmt.Println("count:", err)
			os.Exit(1)
		}
		return n
	}
	handled := 0
	for {
		if done := effects(); done >= inboxMessages {
			fmt.Println("done:", done)
			return 0
		}
		// A one-second lease: what a killed consumer held comes back soon.
		batch, err := c.Pop(ctx, queenside.PopArgs{Queue: "inbox", Group: "inbox", Batch: 5, Partitions: 2, WaitMs: 300, LeaseSeconds: 1})
		if err != nil {
			fmt.Println("pop:", err)
			return 1
		}
		if len(batch.Messages) == 0 {
			stats, err := c.Stats(ctx, "inbox")
			if err != nil {
				fmt.Println("stats:", err)
				return 1
			}
			var lag int64
			for _, p := range stats.Partitions {
				for _, g := range p.Groups {
					lag += g.Lag
				}
			}
			// Every message acked: every effect must be there (counted
			// again: a killed consumer's last commit may have landed since).
			if done := effects(); lag == 0 && done < inboxMessages {
				fmt.Printf("LOST: every message acked, %d effects of %d\n", done, inboxMessages)
				return 4
			}
		}
		for _, m := range batch.Messages {
			tx, err := conn.Begin(ctx)
			if err != nil {
				fmt.Println("begin:", err)
				return 1
			}
			_, err = tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2, $3)`, m.TransactionID, m.Partition, m.Offset)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" {
				fmt.Printf("REDELIVERED %s@%d (%s)\n", m.Partition, m.Offset, m.TransactionID)
				return 3
			} else if err != nil {
				fmt.Println("effect:", err)
				return 1
			}
			time.Sleep(20 * time.Millisecond) // the work: 50 messages take a second, so kills land in the middle
			if ok, err := ack(tx, m); err != nil || !ok {
				// The lease ran out (a slow machine): the message comes
				// again, and its effect must not stay.
				fmt.Printf("not acked %s@%d: %v\n", m.Partition, m.Offset, err)
				tx.Rollback(ctx) //nolint:errcheck
				continue
			}
			if cfg["die-at"] == "before-commit" && handled+1 == dieAfter {
				syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck
			}
			if err := tx.Commit(ctx); err != nil {
				fmt.Println("commit:", err)
				return 1
			}
			handled++
			if cfg["die-at"] == "after-commit" && handled == dieAfter {
				syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck
			}
		}
	}
}
