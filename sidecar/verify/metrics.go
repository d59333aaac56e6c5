package verify

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// spoolCounters are what a sidecar's /metrics says of its spool. The
// counters start from 0 in every incarnation of the process, so the run
// adds up the last sample of each.
type spoolCounters struct {
	Buffered int64 `json:"buffered"` // push items answered buffered: records written
	Replayed int64 `json:"replayed"` // records stored by replay (queued or duplicate)
	Rejected int64 `json:"rejected"` // records the database refused
	Records  int64 `json:"records"`  // records waiting now (a gauge)
	// Replaying is true while the sidecar replays its spool.
	Replaying bool `json:"-"`
}

func (s spoolCounters) plus(o spoolCounters) spoolCounters {
	return spoolCounters{Buffered: s.Buffered + o.Buffered, Replayed: s.Replayed + o.Replayed,
		Rejected: s.Rejected + o.Rejected, Records: s.Records + o.Records}
}

var metricsClient = &http.Client{Timeout: 2 * time.Second}

// scrapeSpool reads the spool's figures from the sidecar's /metrics.
func scrapeSpool(ctx context.Context, addr string) (spoolCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return spoolCounters{}, err
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return spoolCounters{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return spoolCounters{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var s spoolCounters
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := metricLine(sc.Text())
		if !ok {
			continue
		}
		switch name {
		case `queenside_push_items_total{status="buffered"}`:
			s.Buffered = value
		case "queenside_spool_replayed_total":
			s.Replayed = value
		case "queenside_spool_rejected_total":
			s.Rejected = value
		case "queenside_spool_records":
			s.Records = value
		case "queenside_spool_replaying":
			s.Replaying = value != 0
		}
	}
	return s, sc.Err()
}

// metricLine splits a Prometheus text line into its series and value.
func metricLine(line string) (string, int64, bool) {
	if line == "" || line[0] == '#' {
		return "", 0, false
	}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return "", 0, false
	}
	return line[:i], int64(v), true
}
