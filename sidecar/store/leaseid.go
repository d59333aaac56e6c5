package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// leaseRef locates a lease: the cursor row that holds it, and the lease's
// own id. Lease ids handed to clients carry the row's key, so an ack finds
// its cursor by primary key, with no index on a column rewritten by every pop.
type leaseRef struct {
	group     int64
	partition int64
	id        uuid.UUID
}

func (r leaseRef) String() string {
	return fmt.Sprintf("%d.%d.%s", r.group, r.partition, strings.ReplaceAll(r.id.String(), "-", ""))
}

// parseLeaseID reverses leaseRef.String.
func parseLeaseID(s string) (leaseRef, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return leaseRef{}, false
	}
	g, err1 := strconv.ParseInt(parts[0], 10, 64)
	p, err2 := strconv.ParseInt(parts[1], 10, 64)
	id, err3 := uuid.Parse(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || len(parts[2]) != 32 {
		return leaseRef{}, false
	}
	return leaseRef{group: g, partition: p, id: id}, true
}
