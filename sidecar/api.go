package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/dashboard"
	"github.com/queenside/queenside/sidecar/store"
)

// The dashboard at / and the JSON it reads under /api/, documented in
// sidecar/dashboard/API.md. Reads go through gateReads, writes through
// adminOnly (api_auth.go); what a token's scope allows is checked by each
// route (readsQueue, a write's writeCheck), and listings are filtered to
// the queues it may read.

const (
	// dashboardRefresh is how often the dashboard polls.
	dashboardRefresh = 2 * time.Second
	// maxAPIBody bounds a write's JSON body.
	maxAPIBody = 1 << 20
	// Page sizes of partitions and dead letters.
	defaultPartitionPage, maxPartitionPage = 100, 500
	defaultDLQPage, maxDLQPage             = 50, 500
)

func (s *Server) routeDashboard(root *http.ServeMux) {
	mux := http.NewServeMux()
	gated := s.gateReads(mux)
	root.Handle("GET /api/", gated)
	root.Handle("POST /api/", gated)
	root.Handle("GET /", http.FileServerFS(dashboard.Assets()))
	mux.HandleFunc("GET /api/info", s.apiInfo)
	mux.HandleFunc("GET /api/auth", s.apiAuth)
	mux.HandleFunc("GET /api/queues", s.api(s.apiQueues))
	mux.HandleFunc("GET /api/queues/{queue}", s.api(s.readsQueue(s.apiQueue)))
	mux.HandleFunc("GET /api/queues/{queue}/partitions", s.api(s.readsQueue(s.apiPartitions)))
	mux.HandleFunc("GET /api/queues/{queue}/partitions/{partition}/messages", s.api(s.readsQueue(s.apiMessages)))
	mux.HandleFunc("GET /api/queues/{queue}/partitions/{partition}/messages/{offset}", s.api(s.readsQueue(s.apiMessage)))
	mux.HandleFunc("POST /api/queues/{queue}/seek", s.adminOnly(managesPathQueue, s.api(s.opAPI(s.opSeek, "queue"))))
	mux.HandleFunc("POST /api/queues/{queue}/pause", s.adminOnly(managesPathQueue, s.api(s.apiPause)))
	mux.HandleFunc("POST /api/maintenance", s.adminOnly(managesEveryQueue, s.api(s.opAPI(s.opMaintenance))))
	mux.HandleFunc("GET /api/dlq", s.api(s.apiDLQ))
	mux.HandleFunc("POST /api/dlq/replay", s.adminOnly(s.managesDeadLetters(replaySelection), s.api(s.opAPI(s.opDLQReplay))))
	mux.HandleFunc("GET /api/dlq/summary", s.api(s.apiDLQSummary))
	mux.HandleFunc("POST /api/dlq/delete", s.adminOnly(s.managesDeadLetters(protocol.DecodeDLQDeleteArgs), s.api(s.opAPI(s.opDLQDelete))))
	mux.HandleFunc("GET /api/spool", s.apiSpool)
	mux.HandleFunc("GET /api/cluster", s.apiCluster)
	mux.HandleFunc("GET /api/history", s.apiHistory)
	mux.HandleFunc("GET /api/database", s.api(s.apiDatabase))
	noAPI := func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no API at %s %s", r.Method, r.URL.Path))
	}
	mux.HandleFunc("GET /api/", noAPI)
	mux.HandleFunc("POST /api/", noAPI)
}

// api runs fn with a bounded context once the schema is ready, and writes
// its result or its error as JSON.
func (s *Server) api(fn func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			writeAPIError(w, http.StatusServiceUnavailable, protocol.CodeUnavailable, "the database schema is not ready yet")
			return
		}
		ctx, cancel := s.store.Bound(r.Context())
		defer cancel()
		v, err := fn(ctx, r)
		if err = store.TimedOut(ctx, err); err != nil {
			pe := s.toProtocolError(err)
			writeAPIError(w, apiStatus(pe.Code), pe.Code, pe.Message)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func apiStatus(code protocol.Code) int {
	switch code {
	case protocol.CodeNotFound:
		return http.StatusNotFound
	case protocol.CodeForbidden, protocol.CodePermissionDenied:
		return http.StatusForbidden
	case protocol.CodeInvalidArgument, protocol.CodeBadRequest:
		return http.StatusBadRequest
	case protocol.CodeUnavailable, protocol.CodeDraining, protocol.CodeOverloaded, protocol.CodeSpoolFull:
		return http.StatusServiceUnavailable
	case protocol.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away
}

func writeAPIError[C ~string](w http.ResponseWriter, status int, code C, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": string(code), "message": message}})
}

func (s *Server) apiInfo(w http.ResponseWriter, _ *http.Request) {
	writes, reads := "disabled", "open"
	if len(s.opts.Tokens.Admin) > 0 {
		writes = "token"
	}
	if s.opts.Tokens.readsNeedToken() {
		reads = "token"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"sidecarId": s.id, "version": Version, "uptimeSeconds": time.Since(s.started).Seconds(),
		"writes": writes, "reads": reads, "refreshMs": dashboardRefresh.Milliseconds(),
	})
}

// apiAuth tells whether the request's token is one of this sidecar's, and
// what it may do: its role, and its scope, the queues and rights (for a
// token of a file's whole meaning, every queue and the file's rights).
func (s *Server) apiAuth(w http.ResponseWriter, r *http.Request) {
	a := s.opts.Tokens.access(r)
	switch {
	case a.role != roleNone:
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "name": a.name, "role": a.role.String(),
			"scope": map[string]any{"queues": a.scope.Queues, "rights": a.scope.Rights}, "scopeText": a.scope.String(), "scoped": a.scoped()})
	case len(s.opts.Tokens.Admin)+len(s.opts.Tokens.Read) == 0:
		writeAPIError(w, http.StatusForbidden, "writes_disabled",
			"this sidecar has no token: writes are disabled (start it with --admin-token-file to allow them)")
	default:
		writeAPIError(w, http.StatusForbidden, "forbidden", "this is not a token of this sidecar")
	}
}

// apiQueues lists the queues the request may read.
func (s *Server) apiQueues(ctx context.Context, r *http.Request) (any, error) {
	at := time.Now().UTC()
	qs, err := s.store.QueueSummaries(ctx)
	if err != nil {
		return nil, err
	}
	if sc := s.opts.Tokens.access(r).scope; !sc.mayEvery(rightRead) {
		qs = slices.DeleteFunc(qs, func(q store.QueueSummary) bool { return !sc.may(rightRead, q.Queue) })
	}
	return map[string]any{"at": at, "queues": qs}, nil
}

func (s *Server) apiQueue(ctx context.Context, r *http.Request) (any, error) {
	at := time.Now().UTC()
	q, groups, err := s.store.QueueSummary(ctx, r.PathValue("queue"))
	if err != nil {
		return nil, err
	}
	return struct {
		At time.Time `json:"at"`
		store.QueueSummary
		Groups any `json:"groups"`
	}{at, q, groups}, nil
}

func (s *Server) apiPartitions(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	limit, err := queryInt(q.Get("limit"), "limit", defaultPartitionPage, 1, maxPartitionPage)
	if err != nil {
		return nil, err
	}
	page, next, err := s.store.PartitionPage(ctx, r.PathValue("queue"), q.Get("after"), q.Get("prefix"), int(limit))
	if err != nil {
		return nil, err
	}
	res := map[string]any{"partitions": page}
	if next != "" {
		res["next"] = next
	}
	return res, nil
}

// opAPI answers a request with an op of the protocol: the JSON body,
// with the path's values named by pathArgs set on it, goes to the op's own
// decoder, so that the API checks arguments exactly as the op does, and
// the result comes back under the op's wire names.
func (s *Server) opAPI(op func(context.Context, []byte) (any, error), pathArgs ...string) func(context.Context, *http.Request) (any, error) {
	return func(ctx context.Context, r *http.Request) (any, error) {
		extra := map[string]any{}
		for _, name := range pathArgs {
			extra[name] = r.PathValue(name)
		}
		raw, err := bodyAsArgs(r, extra)
		if err != nil {
			return nil, err
		}
		v, err := op(ctx, raw)
		if err != nil {
			return nil, err
		}
		return asJSON(v)
	}
}

// apiPause pauses or resumes a queue's consumption, keeping its other
// options: {paused: bool}.
func (s *Server) apiPause(ctx context.Context, r *http.Request) (any, error) {
	var body struct {
		Paused *bool `json:"paused"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxAPIBody)).Decode(&body); err != nil || body.Paused == nil {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "body: want {\"paused\": true|false}")
	}
	queue := r.PathValue("queue")
	// Asked first, so that a role that may not manage the queue is told
	// that, not that it may not read its options.
	if err := s.store.RequireQueue(ctx, queue, "manage"); err != nil {
		return nil, err
	}
	q, _, err := s.store.QueueSummary(ctx, queue)
	if err != nil {
		return nil, err
	}
	opts := q.Options
	opts.ConsumptionPaused = *body.Paused
	got, err := s.store.Configure(ctx, queue, opts)
	if err != nil {
		return nil, err
	}
	if err := s.refreshControl(ctx); err != nil {
		s.log.Warn("a queue was paused or resumed, but the control state could not be read back", "error", err)
	}
	return map[string]any{"queue": queue, "options": got}, nil
}

func (s *Server) apiDLQ(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	a := protocol.DLQArgs{Queue: q.Get("queue")}
	acc := s.opts.Tokens.access(r)
	if a.Queue != "" {
		if err := protocol.CheckName("queue", a.Queue); err != nil {
			return nil, err
		}
		if err := acc.need(rightRead, a.Queue); err != nil {
			return nil, err
		}
	}
	if g := q.Get("group"); q.Has("group") {
		a.Group = &g
	}
	if p := q.Get("partition"); p != "" {
		a.Partition = &p
	}
	limit, err := queryInt(q.Get("limit"), "limit", defaultDLQPage, 1, maxDLQPage)
	if err != nil {
		return nil, err
	}
	after, err := queryInt(q.Get("afterId"), "afterId", 0, 0, 1<<62)
	if err != nil {
		return nil, err
	}
	a.Limit, a.AfterID = int(limit), after
	if err := dlqFilterQuery(q, &a); err != nil {
		return nil, err
	}
	var res protocol.DLQResult
	if a.Queue == "" && !acc.scope.mayEvery(rightRead) {
		res, err = s.scopedDLQ(ctx, acc.scope, a)
	} else {
		res, err = s.dlq(ctx, a)
	}
	if err != nil {
		return nil, err
	}
	// Payloads are shown decoded, unless they nest too deep to be (then
	// tooDeepNote stands in for them); their stored size is told beside them.
	sizes := make([]int, len(res.Entries))
	for i, e := range res.Entries {
		sizes[i] = len(e.Payload)
		if tooDeepToShow(e.Payload) {
			res.Entries[i].Payload, _ = msgpack.Marshal(tooDeepNote)
		}
	}
	out, err := asJSON(res)
	if err != nil {
		return nil, err
	}
	entries, _ := out.(map[string]any)["entries"].([]any)
	for i, e := range entries {
		if m, ok := e.(map[string]any); ok && i < len(sizes) {
			m["payloadBytes"] = sizes[i]
		}
	}
	return out, nil
}

func (s *Server) apiSpool(w http.ResponseWriter, _ *http.Request) {
	res := map[string]any{"at": time.Now().UTC(), "enabled": s.buffer != nil, "records": 0, "bytes": 0, "replaying": false,
		"replayed": 0, "rejected": 0, "databaseUp": s.ready.Load(), "quarantined": []string{}, "warnings": []string{}}
	if s.buffer != nil {
		b := s.buffer.Stats()
		res["records"], res["bytes"], res["replaying"] = b.Records, b.Bytes, b.Replaying
		res["replayed"], res["rejected"], res["databaseUp"] = b.Replayed, b.Rejected, b.DatabaseUp && s.ready.Load()
		if !b.Oldest.IsZero() {
			res["oldestAt"] = b.Oldest.UTC()
		}
		if b.Quarantined != nil {
			res["quarantined"] = b.Quarantined
		}
		if b.Warnings != nil {
			res["warnings"] = b.Warnings
		}
		if cause := s.spoolingCause(b); cause != "" {
			res["cause"] = cause
		}
		if spooled := s.metrics.spooledByCause(); spooled != nil {
			res["spooled"] = spooled
		}
	}
	writeJSON(w, http.StatusOK, res)
}

// apiCluster answers even while the database is unreachable: that is
// when an operator looks at it.
func (s *Server) apiCluster(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.store.Bound(r.Context())
	defer cancel()
	health := s.Health(ctx)
	db := map[string]any{"ok": health.Database.OK}
	if health.Database.OK {
		db["latencyMs"] = health.Database.LatencyMs
	} else {
		db["error"] = health.Database.Error
	}
	res := map[string]any{"at": time.Now().UTC(), "database": db, "health": health,
		"sidecarId": s.id, "sidecars": []any{}, "popped": s.metrics.popped.Load()}
	if m := s.control.maintenance(); m != nil {
		res["maintenance"] = m
	}
	if health.Database.OK {
		version, sidecars, err := s.store.SidecarSessions(ctx)
		if err != nil {
			db["error"] = err.Error()
		} else {
			db["serverVersion"], res["sidecars"] = version, sidecars
		}
	}
	writeJSON(w, http.StatusOK, res)
}

func queryInt(s, name string, def, lo, hi int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, protocol.Errorf(protocol.CodeInvalidArgument, "%s: want an integer in %d..%d", name, lo, hi)
	}
	return n, nil
}

// bodyAsArgs reads a JSON object, sets extra's keys on it, and encodes it
// as the msgpack args of an op.
func bodyAsArgs(r *http.Request, extra map[string]any) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxAPIBody))
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "body: %v", err)
	}
	args := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&args); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "body: want a JSON object: %v", err)
	}
	for k, v := range extra {
		args[k] = v
	}
	for k, v := range args {
		if n, ok := v.(json.Number); ok {
			args[k] = jsonNumber(n)
		}
		if list, ok := v.([]any); ok {
			for i, e := range list {
				if n, ok := e.(json.Number); ok {
					list[i] = jsonNumber(n)
				}
			}
		}
	}
	return msgpack.Marshal(args)
}

// jsonNumber keeps integers integers, as the ops' decoders want them.
func jsonNumber(n json.Number) any {
	if i, err := n.Int64(); err == nil {
		return i
	}
	f, _ := n.Float64()
	return f
}

// asJSON turns an op's result into plain values under its wire names, the
// msgpack ones: encoded, then decoded generically. A payload, raw msgpack,
// comes out as the value it encodes.
func asJSON(v any) (any, error) {
	raw, err := msgpack.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := msgpack.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return jsonable(out), nil
}

// jsonable makes what msgpack decoded encodable as JSON: maps with other
// keys than strings get their keys printed, and times are shown in UTC.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	case time.Time:
		return x.UTC()
	}
	return v
}
