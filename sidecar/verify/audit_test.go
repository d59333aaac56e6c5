package verify

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	queenside "github.com/queenside/queenside/clients/go"
)

// message builds what a consumer of queue q is delivered: event seq of
// partition p stored at offset off.
func message(t *testing.T, q, p int, seq, off int64) queenside.Message {
	t.Helper()
	payload, err := encodePayload(event{partition: p, seq: seq, pushedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	return queenside.Message{Partition: partitionName(p), Offset: off, Payload: payload, TransactionID: transactionID(q, seq)}
}

// TestAuditDefinitions pins the definitions of the package documentation
// on small histories of one partition.
func TestAuditDefinitions(t *testing.T) {
	type delivery struct{ seq, off int64 }
	cases := []struct {
		name       string
		total      int64 // events pushed to the one partition
		deliveries []delivery
		want       AuditStats
		kinds      []string
	}{
		{name: "exactly once, in order", total: 3,
			deliveries: []delivery{{0, 0}, {1, 1}, {2, 2}},
			want:       AuditStats{Verified: 3, Deliveries: 3, StoredOffsets: 3}},
		{name: "a lapsed lease: the same offsets again are redeliveries", total: 3,
			deliveries: []delivery{{0, 0}, {1, 1}, {0, 0}, {1, 1}, {2, 2}},
			want:       AuditStats{Verified: 3, Deliveries: 5, Redeliveries: 2, FlaggedRedelivered: 2, StoredOffsets: 3}},
		{name: "one event stored twice is a duplicate", total: 3,
			deliveries: []delivery{{0, 0}, {1, 1}, {1, 2}, {2, 3}},
			want:       AuditStats{Verified: 3, Deliveries: 4, StoredOffsets: 4, Duplicates: 1},
			kinds:      []string{ViolationDuplicate}},
		{name: "a lower sequence number at a higher offset is an order violation", total: 3,
			deliveries: []delivery{{0, 0}, {2, 1}, {1, 2}},
			want:       AuditStats{Verified: 3, Deliveries: 3, StoredOffsets: 3, OrderViolations: 1},
			kinds:      []string{ViolationOrder}},
		{name: "an offset delivered before a lower one is an order violation", total: 3,
			deliveries: []delivery{{0, 0}, {2, 2}, {1, 1}},
			want:       AuditStats{Verified: 3, Deliveries: 3, StoredOffsets: 3, OrderViolations: 2},
			kinds:      []string{ViolationDeliveryOrder, ViolationOrder}},
		{name: "a sequence number that never arrives is a gap", total: 4,
			deliveries: []delivery{{0, 0}, {1, 1}, {3, 2}},
			want:       AuditStats{Verified: 3, Deliveries: 3, StoredOffsets: 3, Gaps: 1},
			kinds:      []string{ViolationGap}},
		{name: "one offset with two events is a mismatch", total: 2,
			deliveries: []delivery{{0, 0}, {1, 0}, {1, 1}},
			want:       AuditStats{Verified: 2, Deliveries: 3, Redeliveries: 1, FlaggedRedelivered: 1, StoredOffsets: 2, Mismatches: 1},
			kinds:      []string{ViolationMismatch}},
		{name: "an event never pushed is unknown", total: 1,
			deliveries: []delivery{{0, 0}, {5, 1}},
			want:       AuditStats{Verified: 1, Deliveries: 2, StoredOffsets: 2, Unknown: 1},
			kinds:      []string{ViolationUnknown}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vl := newViolationLog()
			a := newAuditor(2, "stage 2", tc.total, 1, vl)
			seen := map[int64]bool{}
			for _, d := range tc.deliveries {
				m := message(t, 2, 0, d.seq, d.off)
				m.Redelivered = seen[d.off] // as the sidecar marks it
				seen[d.off] = true
				a.deliver(m)
			}
			got := a.finish(map[string]int64{"p0": int64(len(a.parts[0].seqAt))}, tc.total, nil)
			tc.want.Events = tc.total
			if got != tc.want {
				t.Errorf("stats\n got %+v\nwant %+v", got, tc.want)
			}
			kept, _ := vl.snapshot()
			var kinds []string
			for _, v := range kept {
				kinds = append(kinds, v.Kind)
				if v.Partition != "p0" || v.Queue != 2 {
					t.Errorf("violation without its place: %s", v)
				}
			}
			if len(kinds) != len(tc.kinds) {
				t.Fatalf("violations %v, want %v", kept, tc.kinds)
			}
			for i := range kinds {
				if kinds[i] != tc.kinds[i] {
					t.Errorf("violation %d is %s, want %s", i, kinds[i], tc.kinds[i])
				}
			}
		})
	}
}

// TestAuditCorrupt: a message whose transaction id does not match its
// payload is reported, not counted as an event.
func TestAuditCorrupt(t *testing.T) {
	vl := newViolationLog()
	a := newAuditor(1, "stage 1", 1, 1, vl)
	m := message(t, 1, 0, 0, 0)
	m.TransactionID = "q1.7"
	if _, first := a.deliver(m); first {
		t.Error("a corrupt message counted as a first receipt")
	}
	if s := a.snapshot(); s.Corrupt != 1 || s.Verified != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestAuditUndelivered: messages stored beyond what the group received are
// reported with their offsets.
func TestAuditUndelivered(t *testing.T) {
	vl := newViolationLog()
	a := newAuditor(1, "checker", 2, 1, vl)
	a.deliver(message(t, 1, 0, 0, 0))
	a.deliver(message(t, 1, 0, 1, 1))
	a.finish(map[string]int64{"p0": 4}, 2, nil)
	kept, counts := vl.snapshot()
	if counts[ViolationUndelivered] != 1 || len(kept[0].Offsets) != 2 || kept[0].Offsets[0] != 2 {
		t.Errorf("violations %v", kept)
	}
}

// TestAuditRedeliveredFlag: a redelivery must carry redelivered: true; a
// first receipt that carries it is an earlier delivery lost in transit.
func TestAuditRedeliveredFlag(t *testing.T) {
	vl := newViolationLog()
	a := newAuditor(1, "stage 1", 2, 1, vl)
	m := message(t, 1, 0, 0, 0)
	m.Redelivered = true
	a.deliver(m)
	a.deliver(message(t, 1, 0, 1, 1))
	a.deliver(message(t, 1, 0, 1, 1)) // again, unflagged
	s := a.snapshot()
	if s.FirstSeenFlagged != 1 || s.Unflagged != 1 || s.Redeliveries != 1 {
		t.Errorf("stats %+v", s)
	}
	if _, counts := vl.snapshot(); counts[ViolationUnflagged] != 1 {
		t.Errorf("violations %v", counts)
	}
}

func TestMissedRedelivery(t *testing.T) {
	a := newAuditor(1, "stage 1", 3, 1, newViolationLog())
	for _, off := range []int64{0, 1, 2, 0} {
		a.deliver(message(t, 1, 0, off, off))
	}
	missed := a.missedRedelivery(0, []int64{0, 1})
	if len(missed) != 1 || missed[0] != 1 {
		t.Errorf("missed %v, want [1]", missed)
	}
}

func TestEventNumbering(t *testing.T) {
	const total, partitions = 10, 3
	seen := map[int]int64{}
	for k := range int64(total) {
		e := eventOf(k, partitions)
		if e.seq != seen[e.partition] {
			t.Fatalf("event %d: partition %d seq %d, want %d", k, e.partition, e.seq, seen[e.partition])
		}
		seen[e.partition]++
	}
	for p := range partitions {
		if n := expectedEvents(total, partitions, p); n != seen[p] {
			t.Errorf("partition %d expects %d events, got %d", p, n, seen[p])
		}
	}
	if id, err := nextTransactionID(transactionID(2, 17), 2); err != nil || id != "q3.17" {
		t.Errorf("next id %q, %v", id, err)
	}
	if _, err := nextTransactionID("q1.17", 2); err == nil {
		t.Error("an id of another queue was accepted")
	}
}

func TestFormatNumbers(t *testing.T) {
	if got := formatNumbers([]int64{3, 4, 5, 9, 11, 12}); got != "3-5,9,11-12" {
		t.Errorf("got %q", got)
	}
}

// TestAuditPastDuration: events the loader pushed past --duration are known,
// and the gaps are counted against the total it pushed in the end.
func TestAuditPastDuration(t *testing.T) {
	vl := newViolationLog()
	a := newAuditor(1, "stage 1", 2, 1, vl)
	pushed := int64(4)
	a.pushed = func() int64 { return pushed }
	for _, seq := range []int64{0, 1, 2, 4} {
		a.deliver(message(t, 1, 0, seq, seq))
	}
	pushed = 6
	s := a.finish(nil, pushed, nil)
	if s.Verified != 3 || s.Unknown != 1 || s.Events != 6 || s.Gaps != 3 {
		t.Errorf("stats %+v, want 3 verified, 1 unknown (4 had not been pushed), 6 events, gaps 3, 4, 5", s)
	}
}

// TestAuditReportedLoss: an event a sidecar reported lost in this queue or
// an earlier one is counted as reported, not as a gap; one reported in a
// later queue, or in another partition, is still a gap.
func TestAuditReportedLoss(t *testing.T) {
	vl := newViolationLog()
	a := newAuditor(2, "stage 2", 4, 1, vl)
	a.deliver(message(t, 2, 0, 0, 0))
	a.deliver(message(t, 2, 0, 2, 1))
	lost := []LostEvent{{Queue: 1, Partition: "p0", Seq: 1}, {Queue: 3, Partition: "p0", Seq: 3}, {Queue: 1, Partition: "p1", Seq: 3}}
	s := a.finish(nil, 4, lost)
	if s.ReportedLost != 1 || s.Gaps != 1 {
		t.Errorf("stats %+v, want seq 1 reported lost (in queue 1) and seq 3 a gap", s)
	}
	kept, counts := vl.snapshot()
	if counts[ViolationGap] != 1 || len(kept[0].Seqs) != 1 || kept[0].Seqs[0] != 3 {
		t.Errorf("violations %v", kept)
	}
}

// TestReportedLosses reads the losses a sidecar logs for a damaged spool
// record, once each, and nothing from other lines.
func TestReportedLosses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sidecar.log")
	log := `2026-12-07T21:00:00.000Z [WARN]  spool: torn tail cut off segment: path=/x/1.seg bytes=12
2026-12-07T21:00:01.000Z [ERROR] a spooled record was damaged on disk and is lost to the replay: quarantined=/x/q/1.seg offset=400 bytes=60 queue=verify-20261207T2100-ab12-q2 partition=p17 transaction_id=q2.5
2026-12-07T21:00:01.000Z [ERROR] a spooled record was damaged on disk and is lost to the replay: quarantined=/x/q/1.seg offset=400 bytes=60 queue=verify-20261207T2100-ab12-q2 partition=p17 transaction_id=q2.5
2026-12-07T21:00:01.000Z [ERROR] a spooled record was damaged on disk and is lost to the replay: quarantined=/x/q/1.seg offset=900 bytes=60 record=unreadable
`
	if err := os.WriteFile(path, []byte("earlier incarnation\n"+log), 0o600); err != nil {
		t.Fatal(err)
	}
	lost, err := reportedLosses(path, int64(len("earlier incarnation\n")))
	if err != nil {
		t.Fatal(err)
	}
	if want := []LostEvent{{Queue: 2, Partition: "p17", Seq: 5}}; !slices.Equal(lost, want) {
		t.Fatalf("reportedLosses = %v, want %v", lost, want)
	}
}
