package sidecar

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
)

// The message browser's API: a partition's messages a page at a time
// (newest, from an offset, from a time, or around a transaction id), one
// message with its whole payload, and where a group's cursor and lease
// stand among them. Read-only: nothing here moves a cursor or a lease.

const (
	// Messages a page.
	defaultMessagePage, maxMessagePage = 50, 500
	// previewReadBytes bounds the payloads a page reads: a larger one is
	// previewed as "large" and read only when its message is opened.
	previewReadBytes = 64 << 10
	// transactionScan is how many of a partition's newest messages a
	// transaction id search reads when the dedup table does not know it.
	transactionScan = 100_000
)

// groupView is a group's position in the partition, as the page shows it.
type groupView struct {
	Group          string     `json:"group"`
	Cursor         int64      `json:"cursor"`
	Leased         bool       `json:"leased"`
	LeaseFrom      *int64     `json:"leaseFrom,omitempty"`
	LeaseTo        *int64     `json:"leaseTo,omitempty"`
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt,omitempty"`
	Acked          []int64    `json:"acked"`
}

// matchView says how a transaction id search went.
type matchView struct {
	TransactionID string `json:"transactionId"`
	Found         bool   `json:"found"`
	Offset        *int64 `json:"offset,omitempty"`
	// "dedup": the dedup table's index knew it; "recent": found among the
	// newest searchedMessages; "none": in neither.
	SearchedBy       string `json:"searchedBy"`
	SearchedMessages int64  `json:"searchedMessages"`
}

// messagePage is the answer of the messages endpoint.
type messagePage struct {
	Queue       string        `json:"queue"`
	Partition   string        `json:"partition"`
	FirstOffset int64         `json:"firstOffset"`
	HeadOffset  int64         `json:"headOffset"`
	From        int64         `json:"from"`
	Limit       int           `json:"limit"`
	Messages    []messageView `json:"messages"`
	Older       *int64        `json:"older,omitempty"`
	Newer       *int64        `json:"newer,omitempty"`
	Note        string        `json:"note,omitempty"`
	Group       *groupView    `json:"group,omitempty"`
	Match       *matchView    `json:"match,omitempty"`
}

// apiMessages is GET /api/queues/{queue}/partitions/{partition}/messages
// with at most one of from, at and transactionId (none: the newest page),
// and limit and group.
func (s *Server) apiMessages(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	limit, err := queryInt(q.Get("limit"), "limit", defaultMessagePage, 1, maxMessagePage)
	if err != nil {
		return nil, err
	}
	given := 0
	for _, k := range []string{"from", "at", "transactionId"} {
		if q.Has(k) {
			given++
		}
	}
	if given > 1 {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "give at most one of from, at and transactionId")
	}
	b, err := s.browsedPartition(ctx, r)
	if err != nil {
		return nil, err
	}
	page := messagePage{Queue: r.PathValue("queue"), Partition: r.PathValue("partition"),
		FirstOffset: b.First, HeadOffset: b.Head, Limit: int(limit), Messages: []messageView{}}
	switch {
	case q.Has("from"):
		from, err := queryInt(q.Get("from"), "from", 0, 0, math.MaxInt64)
		if err != nil {
			return nil, err
		}
		page.From = from
		if from < b.First {
			page.From = b.First
			page.Note = fmt.Sprintf("offsets before %d are no longer stored (retention): the page starts at %d", b.First, b.First)
		}
	case q.Has("at"):
		at, err := time.Parse(time.RFC3339Nano, q.Get("at"))
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidArgument, "at: want an RFC 3339 time, e.g. 2026-11-30T07:59:00Z")
		}
		if page.From, err = s.store.OffsetAt(ctx, b.ID, at); err != nil {
			return nil, err
		}
		if page.From >= b.Head {
			page.Note = fmt.Sprintf("no message stored was committed at or after %s", at.UTC().Format(time.RFC3339))
		}
	case q.Has("transactionId"):
		txid := q.Get("transactionId")
		if err := protocol.CheckTransactionID("transactionId", txid); err != nil {
			return nil, err
		}
		off, found, byDedup, err := s.store.FindTransaction(ctx, b, txid, transactionScan)
		if err != nil {
			return nil, err
		}
		m := &matchView{TransactionID: txid, Found: found, SearchedBy: "none",
			SearchedMessages: min(transactionScan, b.Head-b.First)}
		page.Match = m
		switch {
		case byDedup:
			m.Offset, m.SearchedBy, m.SearchedMessages = &off, "dedup", 0
		case found:
			m.Offset, m.SearchedBy = &off, "recent"
		default:
			page.From = b.Head
			page.Note = fmt.Sprintf("transaction id %q is not in the deduplication window nor among the newest %d messages", txid, m.SearchedMessages)
		}
		if found {
			// The match starts its page, a few messages before it showing
			// what came just before.
			page.From = max(off-2, b.First)
		}
	default:
		page.From = max(b.Head-limit, b.First)
	}
	if page.From >= b.Head && page.Note == "" {
		page.Note = fmt.Sprintf("no message at or after offset %d yet: the head offset is %d", page.From, b.Head)
	}
	var pos *store.GroupPosition
	if q.Has("group") {
		p, err := s.store.GroupPosition(ctx, b, q.Get("group"))
		if err != nil {
			return nil, browseError(err)
		}
		pos = &p
		page.Group = positionView(p)
	}
	if page.From < b.Head {
		msgs, err := s.store.Messages(ctx, b.ID, page.From, int(limit), previewReadBytes)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			page.Messages = append(page.Messages, s.messageOf(m, page.Queue, pos, false))
		}
	}
	if page.From > b.First {
		older := max(page.From-limit, b.First)
		page.Older = &older
	}
	if next := page.From + int64(len(page.Messages)); len(page.Messages) > 0 && next < b.Head {
		page.Newer = &next
	}
	return page, nil
}

// apiMessage is GET /api/queues/{queue}/partitions/{partition}/messages/{offset}:
// one message with its whole payload.
func (s *Server) apiMessage(ctx context.Context, r *http.Request) (any, error) {
	off, err := queryInt(r.PathValue("offset"), "offset", 0, 0, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	b, err := s.browsedPartition(ctx, r)
	if err != nil {
		return nil, err
	}
	var pos *store.GroupPosition
	if q := r.URL.Query(); q.Has("group") {
		p, err := s.store.GroupPosition(ctx, b, q.Get("group"))
		if err != nil {
			return nil, browseError(err)
		}
		pos = &p
	}
	msgs, err := s.store.Messages(ctx, b.ID, off, 1, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 || msgs[0].Offset != off {
		return nil, protocol.Errorf(protocol.CodeNotFound, "offset %d of partition %q is not stored: it holds %d..%d",
			off, r.PathValue("partition"), b.First, b.Head-1)
	}
	return s.messageOf(msgs[0], r.PathValue("queue"), pos, true), nil
}

// browsedPartition checks the path's names and looks the partition up.
func (s *Server) browsedPartition(ctx context.Context, r *http.Request) (store.PartitionBounds, error) {
	queue, partition := r.PathValue("queue"), r.PathValue("partition")
	if err := protocol.CheckName("queue", queue); err != nil {
		return store.PartitionBounds{}, err
	}
	if err := protocol.CheckPartition("partition", partition); err != nil {
		return store.PartitionBounds{}, err
	}
	return s.store.PartitionBounds(ctx, queue, partition)
}

// browseError makes an unknown group not_found.
func browseError(err error) error {
	if errors.Is(err, store.ErrGroupNotFound) {
		return protocol.Errorf(protocol.CodeNotFound, "%v", err)
	}
	return err
}

func positionView(p store.GroupPosition) *groupView {
	g := &groupView{Group: p.Group, Cursor: p.Cursor, Leased: p.Leased, Acked: p.Acked}
	if p.Leased {
		g.LeaseFrom, g.LeaseTo, g.LeaseExpiresAt = &p.LeaseFrom, &p.LeaseTo, p.LeaseExpiresAt
	}
	return g
}

// messageState is where a message stands for a group: consumed (the cursor
// passed it), acked (acked under the live lease, the cursor waiting for
// an earlier message), leased, or pending.
func messageState(p *store.GroupPosition, offset int64) string {
	switch {
	case offset < p.Cursor:
		return "consumed"
	case p.Leased && offset >= p.LeaseFrom && offset <= p.LeaseTo && slices.Contains(p.Acked, offset):
		return "acked"
	case p.Leased && offset >= p.LeaseFrom && offset <= p.LeaseTo:
		return "leased"
	}
	return "pending"
}
