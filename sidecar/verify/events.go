package verify

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	queenside "github.com/queenside/queenside/clients/go"
)

// An event is identified by its partition and its sequence number there.
// The loader's k-th event (from 0) goes to partition k mod P with sequence
// number k div P, so every partition's numbers run 0, 1, 2... without holes
// and the expected content of each partition is known from P and the count
// alone.
type event struct {
	partition int
	seq       int64
	pushedAt  int64 // Unix nanoseconds of the loader's first push attempt
}

func eventOf(k int64, partitions int) event {
	return event{partition: int(k % int64(partitions)), seq: k / int64(partitions)}
}

// expectedEvents is how many of total events land in partition p.
func expectedEvents(total int64, partitions, p int) int64 {
	n := total / int64(partitions)
	if int64(p) < total%int64(partitions) {
		n++
	}
	return n
}

func partitionName(p int) string { return "p" + strconv.Itoa(p) }

func parsePartition(name string, partitions int) (int, bool) {
	if !strings.HasPrefix(name, "p") {
		return 0, false
	}
	p, err := strconv.Atoi(name[1:])
	return p, err == nil && p >= 0 && p < partitions && partitionName(p) == name
}

// queueName names queue i (from 1) of a run; the run id keeps runs apart.
func queueName(runID string, i int) string { return fmt.Sprintf("verify-%s-q%d", runID, i) }

// groupName is the consumer group reading queue i: the stage that consumes
// it, or the checker for the last queue.
func groupName(i, stages int) string {
	if i > stages {
		return "checker"
	}
	return "stage-" + strconv.Itoa(i)
}

// transactionID is the deduplication key of an event in queue i. A stage
// derives the id it pushes with from the one it consumed ("q2.17" becomes
// "q3.17"), so a step that is retried, by the same consumer or by another
// after a lease lapsed, pushes the same ids and is deduplicated.
func transactionID(queue int, seq int64) string {
	return "q" + strconv.Itoa(queue) + "." + strconv.FormatInt(seq, 10)
}

// nextTransactionID turns the id of a message consumed from queue i into
// the id of the message pushed to queue i+1.
func nextTransactionID(consumed string, queue int) (string, error) {
	prefix := "q" + strconv.Itoa(queue) + "."
	rest, ok := strings.CutPrefix(consumed, prefix)
	if !ok {
		return "", fmt.Errorf("transaction id %q is not one of queue %d", consumed, queue)
	}
	seq, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return "", fmt.Errorf("transaction id %q: %w", consumed, err)
	}
	return transactionID(queue+1, seq), nil
}

// encodePayload writes [seq, pushedAt] as msgpack. Stages pass the bytes on
// unchanged, so the checker reads the loader's own push time.
func encodePayload(e event) (msgpack.RawMessage, error) {
	return msgpack.Marshal([2]int64{e.seq, e.pushedAt})
}

// decodeMessage reads the event a message of queue i carries and checks
// that its partition, payload and transaction id agree with each other.
func decodeMessage(m queenside.Message, queue, partitions int) (event, error) {
	p, ok := parsePartition(m.Partition, partitions)
	if !ok {
		return event{}, fmt.Errorf("partition %q is not one of the run", m.Partition)
	}
	var v [2]int64
	if err := msgpack.Unmarshal(m.Payload, &v); err != nil {
		return event{partition: p}, fmt.Errorf("payload at offset %d does not decode: %w", m.Offset, err)
	}
	e := event{partition: p, seq: v[0], pushedAt: v[1]}
	if want := transactionID(queue, e.seq); m.TransactionID != want {
		return e, fmt.Errorf("offset %d carries sequence number %d but transaction id %q (want %q)", m.Offset, e.seq, m.TransactionID, want)
	}
	return e, nil
}

func (e event) age(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, e.pushedAt))
}
