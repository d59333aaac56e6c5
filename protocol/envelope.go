package protocol

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Request is the envelope of one call. Args holds the exact msgpack encoding
// of the argument map (nil when absent); each operation decodes its own.
type Request struct {
	ID        uint64             `msgpack:"id"`
	Op        string             `msgpack:"op"`
	Args      msgpack.RawMessage `msgpack:"args,omitempty"`
	TimeoutMs uint64             `msgpack:"timeoutMs,omitempty"`
}

// Response is the envelope of an answer, or of an unsolicited notice (ID 0).
type Response struct {
	ID     uint64             `msgpack:"id"`
	Result msgpack.RawMessage `msgpack:"result,omitempty"`
	Error  *Error             `msgpack:"error,omitempty"`
	Notice string             `msgpack:"notice,omitempty"`
}

// NoticeDraining is sent to every connection when the sidecar begins to shut down.
const NoticeDraining = "draining"

// DecodeRequest parses one frame body. On failure it still returns the
// request id when it could be read (else 0), so the error can be addressed.
// Every envelope key is checked before the body is judged, so a wrong type
// in one key does not hide the id carried by another.
func DecodeRequest(body []byte) (Request, *Error) {
	var req Request
	d := newDec(body)
	n, err := mapLen(d)
	if err != nil || n < 0 {
		return req, Errorf(CodeBadRequest, "body is not a msgpack map")
	}
	var first *Error
	fail := func(e *Error) {
		if first == nil {
			first = e
		}
	}
	seenID, seenOp := false, false
	for i := 0; i < n; i++ {
		key, err := readKey(d)
		if err != nil {
			return req, Errorf(CodeBadRequest, "envelope: %v", err)
		}
		switch key {
		case "id":
			id, err := readUint(d)
			if err != nil || id == 0 {
				fail(Errorf(CodeBadRequest, "id must be an integer >= 1"))
				continue
			}
			req.ID, seenID = id, true
		case "op":
			if c, _ := d.PeekCode(); !msgpcode.IsString(c) {
				fail(Errorf(CodeBadRequest, "op must be a string"))
				if d.Skip() != nil {
					return req, Errorf(CodeBadRequest, "envelope: truncated")
				}
				continue
			}
			if req.Op, err = d.DecodeString(); err != nil {
				return req, Errorf(CodeBadRequest, "envelope: %v", err)
			}
			seenOp = true
		case "args":
			raw, err := d.raw()
			if err != nil {
				return req, Errorf(CodeBadRequest, "envelope: %v", err)
			}
			switch {
			case len(raw) == 1 && raw[0] == msgpcode.Nil:
			case isMapCode(raw[0]):
				if deep, _ := NestsDeeperThan(raw, MaxNesting); deep {
					fail(Errorf(CodeBadRequest, "args nest arrays and maps more than %d levels deep", MaxNesting))
					continue
				}
				req.Args = raw
			default:
				fail(Errorf(CodeBadRequest, "args must be a map"))
			}
		case "timeoutMs":
			ms, err := readUint(d)
			if err != nil {
				fail(Errorf(CodeBadRequest, "timeoutMs must be a non-negative integer"))
				continue
			}
			req.TimeoutMs = ms
		default:
			if err := d.Skip(); err != nil {
				return req, Errorf(CodeBadRequest, "envelope: %v", err)
			}
		}
	}
	switch {
	case d.r.Len() != 0:
		return req, Errorf(CodeBadRequest, "trailing bytes after the body map")
	case first != nil:
		return req, first
	case !seenID:
		return req, Errorf(CodeBadRequest, "missing id")
	case !seenOp:
		return req, Errorf(CodeBadRequest, "missing op")
	}
	return req, nil
}

// DecodeResponse parses one response frame body, as Unmarshal into a
// Response does, but Result is a sub-slice of body rather than a copy: a
// pop's answer is the bulk of what a consumer reads, and the decoder's
// RawMessage copies it byte by byte through a scratch buffer. body must
// not be reused while Result is.
func DecodeResponse(body []byte) (Response, error) {
	var resp Response
	d := newDec(body)
	n, err := mapLen(d)
	if err != nil {
		return resp, fmt.Errorf("body is not a msgpack map: %w", err)
	}
	for i := 0; i < n; i++ {
		key, err := readKey(d)
		if err != nil {
			return resp, err
		}
		switch key {
		case "id":
			err = d.Decode(&resp.ID)
		case "result":
			if resp.Result, err = d.raw(); len(resp.Result) == 1 && resp.Result[0] == msgpcode.Nil {
				resp.Result = nil // as the decoder's RawMessage reads nil
			}
		case "error":
			err = d.Decode(&resp.Error)
		case "notice":
			err = d.Decode(&resp.Notice)
		default:
			err = d.Skip()
		}
		if err != nil {
			return resp, fmt.Errorf("%s: %w", key, err)
		}
	}
	if d.r.Len() != 0 {
		return resp, errors.New("trailing bytes after the body map")
	}
	return resp, nil
}

// AppendRequest appends the body of a request to dst, with args encoded in
// place: the bytes of Marshal(Request{...}) with Args = Marshal(args),
// without encoding and copying the arguments twice.
func AppendRequest(dst []byte, id uint64, op string, args any, timeoutMs uint64) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	e := newEncoder(buf)
	w := fieldWriter{e: e}
	w.mapLen(2 + boolInt(args != nil) + boolInt(timeoutMs != 0))
	w.key("id")
	w.err(e.EncodeUint(id))
	w.str("op", op)
	if args != nil {
		w.key("args")
		w.err(e.Encode(args))
	}
	if timeoutMs != 0 {
		w.key("timeoutMs")
		w.err(e.EncodeUint(timeoutMs))
	}
	if w.failed != nil {
		return dst, w.failed
	}
	return buf.Bytes(), nil
}

// AppendResult appends the body of a successful response to dst.
func AppendResult(dst []byte, id uint64, result any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	e := newEncoder(buf)
	_ = e.EncodeMapLen(2)
	_ = e.EncodeString("id")
	_ = e.EncodeUint(id)
	_ = e.EncodeString("result")
	if err := e.Encode(result); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}

// AppendError appends the body of an error response to dst.
func AppendError(dst []byte, id uint64, e *Error) []byte {
	out, err := Append(dst, Response{ID: id, Error: e})
	if err != nil { // an Error always encodes; keep the contract even if not
		out, _ = Append(dst, Response{ID: id, Error: Errorf(CodeInternal, "encode error: %v", err)})
	}
	return out
}

// AppendNotice appends the body of an unsolicited notice to dst.
func AppendNotice(dst []byte, notice string) []byte {
	out, _ := Append(dst, Response{Notice: notice})
	return out
}
