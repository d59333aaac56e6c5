package sidecar

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/crypt"
	"github.com/queenside/queenside/sidecar/store"
)

// How the message browser shows a stored message and its payload. A
// payload is msgpack: shown as the JSON of the value it encodes; a string
// or binary value holding a JSON object or array is shown as that JSON;
// other binary as hex (the preview) and base64 (the whole payload). A
// sealed payload is opened when this sidecar holds its key.

// previewChars bounds a payload's preview text.
const previewChars = 400

// ShownNesting is how deep a payload's arrays and maps may nest to be shown
// decoded, on the dashboard and by the command line: deeper than a person
// reads, and shallow enough that decoding it and encoding its JSON take
// no time and no stack to speak of. A deeper payload is shown as bytes,
// with a note saying why; it was stored and is delivered as it is.
const ShownNesting = 100

// tooDeepToShow says whether a payload nests deeper than ShownNesting
// (a payload that is not one msgpack value is not).
func tooDeepToShow(raw []byte) bool {
	deep, err := protocol.NestsDeeperThan(raw, ShownNesting)
	return err == nil && deep
}

// tooDeepNote is what a payload too deep to show decoded is shown as.
var tooDeepNote = fmt.Sprintf("nested more than %d levels deep: shown as bytes", ShownNesting)

// Payload kinds.
const (
	kindMsgpack = "msgpack" // a msgpack value, shown as JSON
	kindJSON    = "json"    // a string or binary holding JSON text, shown parsed
	kindBytes   = "bytes"   // binary: hex in the preview, base64 whole
	kindSealed  = "sealed"  // sealed under a key this sidecar cannot open it with
	kindLarge   = "large"   // too large for a page: read when the message is opened
	kindInvalid = "invalid" // not one msgpack value: shown as bytes
)

type messageView struct {
	Offset        int64             `json:"offset"`
	MessageID     string            `json:"messageId"`
	TransactionID string            `json:"transactionId"`
	CommittedAt   time.Time         `json:"committedAt"`
	TraceID       string            `json:"traceId,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Producer      string            `json:"producer,omitempty"`
	PayloadBytes  int               `json:"payloadBytes"`
	Payload       payloadView       `json:"payload"`
	// With a group: consumed, acked, leased or pending, and the failed
	// deliveries of a message not consumed yet.
	State    string `json:"state,omitempty"`
	Failures int    `json:"failures,omitempty"`
}

type payloadView struct {
	Kind       string `json:"kind"`
	SealedWith string `json:"sealedWith,omitempty"` // the key id of a sealed payload
	Preview    string `json:"preview"`
	Truncated  bool   `json:"truncated,omitempty"`
	Note       string `json:"note,omitempty"`
	// The whole payload, when the message is opened: the JSON of a
	// msgpack or json one, base64 of bytes.
	Value  json.RawMessage `json:"value,omitempty"`
	Base64 string          `json:"base64,omitempty"`
}

// messageOf makes the view of a stored message; whole says whether the
// whole payload goes with it, pos (nil for none) adds a group's state.
func (s *Server) messageOf(m store.StoredMessage, queue string, pos *store.GroupPosition, whole bool) messageView {
	v := messageView{Offset: m.Offset, MessageID: m.MessageID.String(), TransactionID: m.TransactionID,
		CommittedAt: m.CommittedAt.UTC(), TraceID: m.TraceID, Producer: m.Producer, PayloadBytes: m.PayloadBytes}
	if m.Headers != nil {
		if err := msgpack.Unmarshal(m.Headers, &v.Headers); err != nil {
			v.Headers = map[string]string{"(unreadable)": err.Error()}
		}
	}
	v.Payload = s.payloadOf(m, queue, whole)
	if pos != nil {
		v.State = messageState(pos, m.Offset)
		v.Failures = pos.Failures[m.Offset]
	}
	return v
}

func (s *Server) payloadOf(m store.StoredMessage, queue string, whole bool) payloadView {
	if m.Payload == nil && m.PayloadBytes > previewReadBytes {
		return payloadView{Kind: kindLarge, Note: fmt.Sprintf("%d bytes: open the message to read it", m.PayloadBytes)}
	}
	plain := m.Payload
	keyID := ""
	if crypt.IsPacked(plain) {
		id, _, err := crypt.UnpackRecord(plain)
		if err != nil {
			return payloadView{Kind: kindSealed, Note: fmt.Sprintf("a sealed payload that cannot be read: %v", err)}
		}
		keyID = id
		if !s.opts.Keys.Has(id) {
			return payloadView{Kind: kindSealed, SealedWith: id,
				Note: fmt.Sprintf("sealed with key %s, not held by this sidecar", id)}
		}
		opened, perr := s.openPayload(plain, queue, m.MessageID.String())
		if perr != nil {
			return payloadView{Kind: kindSealed, SealedWith: id, Note: perr.Message}
		}
		plain = opened
	}
	p := decodePayload(plain, whole)
	p.SealedWith = keyID
	return p
}

// decodePayload classifies a plaintext msgpack payload and previews it.
func decodePayload(raw []byte, whole bool) payloadView {
	if tooDeepToShow(raw) {
		p := bytesView(raw, whole)
		p.Note = tooDeepNote
		return p
	}
	var v any
	rd := bytes.NewReader(raw)
	if err := msgpack.NewDecoder(rd).Decode(&v); err != nil || rd.Len() > 0 {
		p := bytesView(raw, whole)
		p.Kind, p.Note = kindInvalid, "not one msgpack value: shown as bytes"
		return p
	}
	var text []byte
	switch x := v.(type) {
	case []byte:
		text = x
	case string:
		text = []byte(x)
	}
	if text != nil && isJSONDocument(text) {
		var compact bytes.Buffer
		json.Compact(&compact, text) //nolint:errcheck // valid, checked above
		return jsonView(kindJSON, compact.Bytes(), whole)
	}
	if b, ok := v.([]byte); ok {
		return bytesView(b, whole)
	}
	out, err := json.Marshal(jsonable(v))
	if err != nil { // NaN or an infinity: no JSON for it
		return payloadView{Kind: kindMsgpack, Preview: truncate(fmt.Sprint(v)), Note: "no JSON form: " + err.Error()}
	}
	return jsonView(kindMsgpack, out, whole)
}

// isJSONDocument: a JSON object or array (a bare string or number is
// better shown as the msgpack value it is).
func isJSONDocument(b []byte) bool {
	t := bytes.TrimSpace(b)
	return len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t)
}

func jsonView(kind string, text []byte, whole bool) payloadView {
	p := payloadView{Kind: kind, Preview: truncate(string(text))}
	p.Truncated = len(p.Preview) < len(text)
	if whole {
		p.Value = text
	}
	return p
}

func bytesView(b []byte, whole bool) payloadView {
	shown := b[:min(len(b), previewChars/2)]
	p := payloadView{Kind: kindBytes, Preview: hex.EncodeToString(shown), Truncated: len(shown) < len(b)}
	if whole {
		p.Base64 = base64.StdEncoding.EncodeToString(b)
	}
	return p
}

// truncate cuts s to previewChars bytes at a character boundary.
func truncate(s string) string {
	if len(s) <= previewChars {
		return s
	}
	cut := previewChars
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
