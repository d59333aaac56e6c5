package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/queenside/queenside/protocol"
)

// PopRequest is a validated pop.
type PopRequest struct {
	Queue        string
	Partition    string // "" for any
	Group        string // "" for queue mode
	Batch        int
	Partitions   int
	LeaseSeconds int // 0 for the queue's
	AutoAck      bool
	Mode         string
	From         *time.Time
}

// onePartitionSQL serves a call of one request for one partition: pop
// (0006) costs less there than pop_from, whose set-based statements pay off
// from a few partitions or requests on. Its rows have the same columns,
// the first two aside: they are all the one request's, one partition's.
const onePartitionSQL = `SELECT 1, 1, partition_id, partition_name, lease_id, lease_from, lease_to, lease_expires_at,
	head_attempts, seen_to, first_offset, committed_at, message_ids, transaction_ids, payloads, trace_ids, headers,
	producer
FROM queenside.pop($1, $2, 1, $3, $4, $5)`

const popSQL = `SELECT request, serve_order, partition_id, partition_name, lease_id, lease_from, lease_to,
	lease_expires_at, head_attempts, seen_to, first_offset, committed_at, message_ids, transaction_ids, payloads,
	trace_ids, headers, producer
FROM queenside.pop_from($1, $2, $3, $4, $5, $6, $7)`

// readySQL finds, without locking anything, the partitions a group may
// be served from, oldest first: on Citus, where a pop that names no
// partition chooses among these (see popCall).
const readySQL = `SELECT partition_id FROM queenside.ready_partitions($1, $2)`

// ErrMessageTooLarge means the next message alone would not fit in a
// response frame: it cannot be delivered until the limit is raised.
var ErrMessageTooLarge = errors.New("store: message larger than the response limit")

// PopKey is what pops must share to be served by one call of
// queenside.pop_from: everything but their batch and number of partitions.
type PopKey struct {
	Queue, Partition, Group, Mode string
	From                          int64 // UnixNano of PopRequest.From; 0 for none
	LeaseSeconds                  int
	AutoAck                       bool
}

// Key returns the pops r can be served with.
func (r PopRequest) Key() PopKey {
	k := PopKey{Queue: r.Queue, Partition: r.Partition, Group: r.Group, Mode: r.Mode,
		LeaseSeconds: r.LeaseSeconds, AutoAck: r.AutoAck}
	if r.From != nil {
		k.From = r.From.UnixNano()
	}
	return k
}

// Pop delivers messages to a group in one transaction: see queenside.pop_from.
// The result must fit in maxBytes once encoded; one that does not is taken
// back (its leases withdrawn, or with auto-ack its transaction rolled back)
// and the pop served again with fewer messages, so a result too large to
// send never moves a cursor, holds a lease or counts a delivery.
func (s *Store) Pop(ctx context.Context, r PopRequest, maxBytes int) (protocol.PopResult, error) {
	for {
		res, sizes, err := s.popRetrying(ctx, []PopRequest{r}, maxBytes)
		if err != nil {
			return protocol.PopResult{}, err
		}
		if sizes[0] <= maxBytes {
			return res[0], nil
		}
		if len(res[0].Messages) <= 1 {
			m := res[0].Messages[0]
			return protocol.PopResult{}, fmt.Errorf("%w: %s/%s offset %d needs about %d bytes, the limit is %d",
				ErrMessageTooLarge, m.Queue, m.Partition, m.Offset, sizes[0], maxBytes)
		}
		r.Batch = len(res[0].Messages) / 2
	}
}

// popAlone serves several pops of one PopKey in a transaction of their own,
// the first request getting the partitions whose messages waited longest,
// and returns each its result or its error. When one of the results would
// not fit in maxBytes, nothing is kept and each request is served alone as
// Pop serves it.
func (s *Store) popAlone(ctx context.Context, reqs []PopRequest, maxBytes int) ([]protocol.PopResult, []error) {
	errs := make([]error, len(reqs))
	res, sizes, err := s.popRetrying(ctx, reqs, maxBytes)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return make([]protocol.PopResult, len(reqs)), errs
	}
	if slices.Max(sizes) <= maxBytes {
		return res, errs
	}
	for i, r := range reqs {
		res[i], errs[i] = s.Pop(ctx, r, maxBytes)
	}
	return res, errs
}

// popRetrying is popOnce, looking the ids up again once when a cached one
// names a group or partition that is gone.
func (s *Store) popRetrying(ctx context.Context, reqs []PopRequest, maxBytes int) (res []protocol.PopResult, sizes []int, err error) {
	err = againIfAborted(ctx, func() error {
		res, sizes, err = s.popOnce(ctx, reqs, maxBytes)
		if isNoData(err) {
			s.groups.reset()
			s.parts.reset()
			res, sizes, err = s.popOnce(ctx, reqs, maxBytes)
		}
		return err
	})
	return res, sizes, err
}

// resultBound is an upper bound of the encoded size of a pop result: each
// message's variable fields plus a generous allowance for its keys and fixed
// fields, and as much for each lease and for the envelope.
func resultBound(res protocol.PopResult, headerBytes int) int {
	const perMessage, perLease, envelope = 320, 640, 1024
	n := envelope + headerBytes + perLease*len(res.Leases)
	for _, m := range res.Messages {
		n += perMessage + len(m.Payload) + len(m.Queue) + len(m.Partition) + len(m.TransactionID) + len(m.TraceID) + len(m.Producer)
	}
	return n
}

func isNoData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "P0002"
}

// popOnce runs the pops' call (popCall) in a transaction, and takes it back if
// a result's size bound is over maxBytes; it returns the results and their
// bounds either way.
func (s *Store) popOnce(ctx context.Context, reqs []PopRequest, maxBytes int) ([]protocol.PopResult, []int, error) {
	c, err := s.newPopCall(ctx, reqs)
	if err != nil {
		return nil, nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("pop %s: %w", reqs[0].Queue, err)
	}
	defer s.release(ctx, conn)
	// BEGIN and COMMIT travel with the pop: one round trip. A pop that
	// acks as it goes moves cursors that cannot be moved back, so it
	// commits only once its results are known to fit (a second round trip).
	// On Citus a call may take passes: the transaction ends after them.
	committed := c.leases() && c.final()
	var b pgx.Batch
	s.queueBegin(&b, committed)
	c.queue(&b)
	if committed {
		b.Queue("COMMIT")
	}
	br := conn.SendBatch(ctx, &b)
	err = begun(br, committed)
	var more bool
	if err == nil {
		more, err = c.readPass(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && more {
		err = morePasses(ctx, conn, []*popCall{c})
	}
	var res []protocol.PopResult
	var sizes []int
	if err == nil {
		res, sizes, err = c.results()
	}
	tooLarge := err == nil && slices.Max(sizes) > maxBytes
	if err := settle(ctx, conn, committed, !tooLarge, err); err != nil {
		return nil, nil, fmt.Errorf("pop %s: %w", reqs[0].Queue, err)
	}
	if committed && tooLarge {
		if err := s.withdraw(ctx, res); err != nil {
			return nil, nil, fmt.Errorf("pop %s: withdraw a result too large to send: %w", reqs[0].Queue, err)
		}
	}
	return res, sizes, nil
}

// morePasses serves, inside the transaction on conn, the passes that
// follow the first of calls which have more (see popCall.assign): the next
// pass of each in one round trip, until none has more.
func morePasses(ctx context.Context, conn *pgxpool.Conn, calls []*popCall) error {
	for len(calls) > 0 {
		var b pgx.Batch
		for _, c := range calls {
			c.queue(&b)
		}
		br := conn.SendBatch(ctx, &b)
		var next []*popCall
		var err error
		for _, c := range calls {
			var more bool
			if more, err = c.readPass(br); err != nil {
				break
			}
			if more {
				next = append(next, c)
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		calls = next
	}
	return nil
}

// popCall is what serves pops of one PopKey: one call of
// queenside.pop_from, or on Citus, when they name no partition, a call a
// shard that holds partitions ready for them, in passes (see assign).
type popCall struct {
	reqs         []PopRequest
	ids          groupIDs
	leaseSeconds *int
	parts        []popPart   // the calls of the pass to come
	pending      [][]int64   // on Citus: the ready partitions of the shards not looked at yet, oldest first
	sharded      bool        // pending holds the ready partitions of shards
	routed       bool        // on Citus: each call goes to its shard's worker (queuePart)
	left         []popBudget // what each request may still be served
	runs         []popRun    // what was read
	pass         int32       // of the parts to come, from 1
}

// popPart is one call of pop_from, for some of the requests.
type popPart struct {
	pids                []int64 // the partitions to choose among; nil: any of the group's
	reqs                []int   // the requests it serves, indexes into popCall.reqs
	partitions, batches []int32
}

// popBudget is what a request may still be served: partitions, messages.
type popBudget struct{ partitions, messages int }

// newPopCall looks up (or creates) the group and partition the pops name,
// and on Citus, for pops naming none, finds the partitions ready for them.
func (s *Store) newPopCall(ctx context.Context, reqs []PopRequest) (*popCall, error) {
	r := reqs[0]
	c := &popCall{reqs: reqs, left: make([]popBudget, len(reqs))}
	citus, err := s.onCitus(ctx)
	if err != nil {
		return nil, err
	}
	c.routed = citus
	if c.ids, err = s.groupID(ctx, groupKey{r.Queue, r.Group}, r.Mode, r.From); err != nil {
		return nil, err
	}
	if r.LeaseSeconds > 0 {
		c.leaseSeconds = &r.LeaseSeconds
	}
	for i, q := range reqs {
		c.left[i] = popBudget{q.Partitions, q.Batch}
	}
	var pids []int64
	if r.Partition != "" {
		id, err := s.partitionID(ctx, partitionKey{r.Queue, r.Partition})
		if err != nil {
			return nil, err
		}
		pids = []int64{id}
	} else if citus {
		if c.pending, err = s.readyByShard(ctx, c.ids.group, reqs); err != nil {
			return nil, err
		}
		c.sharded = true
		c.assign()
		return c, nil
	}
	c.pending = [][]int64{pids}
	c.assign()
	return c, nil
}

// readyByShard finds the partitions ready for the pops, without locking
// any, by a look across shards, and groups them by shard, the shard of the
// oldest first. pop_from locks what it takes and checks it again, so one
// another pop took meanwhile is skipped; twice the partitions asked for
// are looked for, to make up for those.
func (s *Store) readyByShard(ctx context.Context, group int64, reqs []PopRequest) ([][]int64, error) {
	want := 0
	for _, r := range reqs {
		want += r.Partitions
	}
	rows, err := s.pool.Query(ctx, readySQL, group, 2*want)
	if err != nil {
		return nil, fmt.Errorf("ready partitions: %w", err)
	}
	ready, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("ready partitions: %w", err)
	}
	shards, err := s.shardsOf(ctx, ready)
	if err != nil {
		return nil, err
	}
	groups := byShard(shards)
	// A group's first position is its oldest partition.
	slices.SortFunc(groups, func(a, b []int) int { return cmp.Compare(a[0], b[0]) })
	out := make([][]int64, len(groups))
	for g, positions := range groups {
		for _, i := range positions {
			out[g] = append(out[g], ready[i])
		}
	}
	return out, nil
}

// assign makes the calls of the next pass: the requests that may still be
// served take, in order, the shards not looked at yet, each shard as many
// requests as it has partitions for, each request one shard in the pass.
// On one PostgreSQL, or for a named partition, there is one pass of one
// call. On Citus a request is served by the shard of the oldest partition
// ready first, and by more shards only while that leaves it wanting: its
// leases, and so its ack, then mostly lie on one shard; no lock is taken
// on two shards by one statement; and one transaction serves the round.
func (c *popCall) assign() {
	c.parts = nil
	c.pass++
	var wanting []int
	for i, b := range c.left {
		if b.partitions > 0 && b.messages > 0 {
			wanting = append(wanting, i)
		}
	}
	for next := 0; len(c.pending) > 0 && next < len(wanting); {
		part := popPart{pids: c.pending[0]}
		c.pending = c.pending[1:]
		room := len(part.pids)
		if !c.sharded {
			room = math.MaxInt // every request, in one call
		}
		for ; room > 0 && next < len(wanting); next++ {
			i := wanting[next]
			part.reqs = append(part.reqs, i)
			part.partitions = append(part.partitions, int32(c.left[i].partitions))
			part.batches = append(part.batches, int32(c.left[i].messages))
			room -= c.left[i].partitions
		}
		c.parts = append(c.parts, part)
	}
}

// final tells whether the pass to come is the last: then the transaction
// may end with it.
func (c *popCall) final() bool { return len(c.pending) == 0 }

func (c *popCall) queue(b *pgx.Batch) {
	for i := range c.parts {
		c.queuePart(b, i)
	}
}

// queuePart queues the call of the pass's part i. On Citus it is routed
// by a partition of its shard: sent whole to that shard's worker when it
// runs alone (routedRound), its statements routed one by one in a
// transaction.
func (c *popCall) queuePart(b *pgx.Batch, i int) {
	p := c.parts[i]
	if !c.routed && len(c.reqs) == 1 && p.partitions[0] == 1 && len(p.pids) <= 1 {
		var partition *int64
		if len(p.pids) == 1 {
			partition = &p.pids[0]
		}
		b.Queue(onePartitionSQL, c.ids.group, partition, p.batches[0], c.leaseSeconds, c.reqs[0].AutoAck)
		return
	}
	var route *int64
	if c.routed && p.pids != nil {
		route = &p.pids[0]
	}
	b.Queue(popSQL, route, c.ids.group, optionalArray(p.pids), pgtype.FlatArray[int32](p.partitions),
		pgtype.FlatArray[int32](p.batches), c.leaseSeconds, c.reqs[0].AutoAck)
}

// readPass reads the answer of the pass's calls, and makes the next pass
// (assign); more tells whether there is one.
func (c *popCall) readPass(br pgx.BatchResults) (more bool, err error) {
	for i := range c.parts {
		if err := c.readPart(br, i); err != nil {
			return false, err
		}
	}
	c.assign()
	return len(c.parts) > 0, nil
}

// readPart reads the answer of the pass's part i.
func (c *popCall) readPart(br pgx.BatchResults, i int) error {
	p := c.parts[i]
	runs, err := readPop(br)
	if err != nil {
		return err
	}
	served := map[int32]bool{}
	for k := range runs {
		u := &runs[k]
		if u.request < 1 || int(u.request) > len(p.reqs) {
			return fmt.Errorf("answered request %d of %d", u.request, len(p.reqs))
		}
		u.request = int32(p.reqs[u.request-1] + 1)
		// Serve orders count from 1 in each call: a pass's come after
		// those of the passes before.
		u.order += c.pass << 20
		b := &c.left[u.request-1]
		if !served[u.order] {
			served[u.order] = true
			b.partitions--
		}
		b.messages -= len(u.mids)
	}
	c.runs = append(c.runs, runs...)
	return nil
}

// leases tells whether the call's pops lease what they deliver (the
// cursors stay put until acked), rather than ack it at once.
func (c *popCall) leases() bool { return !c.reqs[0].AutoAck }

// results turns what the passes read into each request's result, and
// returns the results' size bounds.
func (c *popCall) results() ([]protocol.PopResult, []int, error) {
	return assemble(c.runs, c.reqs, c.ids)
}

// popRun is one row of queenside.pop_from: a run of one segment's
// messages, for one request, with its partition's lease.
type popRun struct {
	request, order int32
	partition      int64
	name           string
	lease          *[16]byte
	from, to       *int64
	expires        *time.Time
	attempts       *int32
	seenTo         int64
	first          int64
	committedAt    time.Time
	mids           pgtype.FlatArray[[16]byte]
	txids          pgtype.FlatArray[string]
	payloads       pgtype.FlatArray[[]byte]
	traces         pgtype.FlatArray[*string]
	headers        pgtype.FlatArray[[]byte]
	producer       *string // the role that pushed the segment; nil before version 28
}

func readPop(br pgx.BatchResults) ([]popRun, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var runs []popRun
	for rows.Next() {
		var u popRun
		if err := rows.Scan(&u.request, &u.order, &u.partition, &u.name, &u.lease, &u.from, &u.to, &u.expires,
			&u.attempts, &u.seenTo, &u.first, &u.committedAt, &u.mids, &u.txids, &u.payloads, &u.traces, &u.headers, &u.producer); err != nil {
			return nil, err
		}
		if len(u.txids) != len(u.mids) || len(u.payloads) != len(u.mids) {
			return nil, fmt.Errorf("segment of %s at %d has arrays of %d, %d and %d",
				u.name, u.first, len(u.mids), len(u.txids), len(u.payloads))
		}
		runs = append(runs, u)
	}
	return runs, rows.Err()
}

// assemble turns the runs into each request's result, partitions in the
// order they were served and each partition's messages in offset order,
// and returns each result's size bound.
func assemble(runs []popRun, reqs []PopRequest, ids groupIDs) ([]protocol.PopResult, []int, error) {
	slices.SortFunc(runs, func(a, b popRun) int {
		return cmp.Or(cmp.Compare(a.request, b.request), cmp.Compare(a.order, b.order), cmp.Compare(a.first, b.first))
	})
	res := make([]protocol.PopResult, len(reqs))
	headerBytes := make([]int, len(reqs))
	for i := range res {
		res[i] = protocol.PopResult{Messages: []protocol.Message{}, Leases: []protocol.Lease{}}
	}
	lastRequest, lastOrder := int32(-1), int32(-1)
	var leaseID string
	for _, u := range runs {
		if u.request < 1 || int(u.request) > len(reqs) {
			return nil, nil, fmt.Errorf("answered request %d of %d", u.request, len(reqs))
		}
		q, out := reqs[u.request-1], &res[u.request-1]
		if u.request != lastRequest || u.order != lastOrder {
			lastRequest, lastOrder, leaseID = u.request, u.order, ""
			if u.lease != nil {
				leaseID = leaseRef{group: ids.group, partition: u.partition, id: *u.lease}.String()
				out.Leases = append(out.Leases, protocol.Lease{
					LeaseID: leaseID, Queue: q.Queue, Partition: u.name, Group: q.Group,
					FromOffset: *u.from, ToOffset: *u.to, ExpiresAt: *u.expires, HeadAttempts: int(*u.attempts),
				})
			}
		}
		for i := range u.mids {
			m := protocol.Message{
				Queue: q.Queue, Partition: u.name, Offset: u.first + int64(i),
				MessageID: uuid.UUID(u.mids[i]).String(), TransactionID: u.txids[i], Payload: u.payloads[i],
				CommittedAt: u.committedAt, LeaseID: leaseID,
			}
			m.Redelivered = m.Offset <= u.seenTo
			if u.producer != nil {
				m.Producer = *u.producer
			}
			if i < len(u.traces) && u.traces[i] != nil {
				m.TraceID = *u.traces[i]
			}
			if i < len(u.headers) && u.headers[i] != nil {
				headerBytes[u.request-1] += len(u.headers[i])
				if err := msgpack.Unmarshal(u.headers[i], &m.Headers); err != nil {
					return nil, nil, fmt.Errorf("stored headers of offset %d: %w", m.Offset, err)
				}
			}
			out.Messages = append(out.Messages, m)
		}
	}
	sizes := make([]int, len(reqs))
	for i := range res {
		sizes[i] = resultBound(res[i], headerBytes[i])
	}
	return res, sizes, nil
}
