package protocol

import "fmt"

// Decode decodes m's payload into v, as json.Unmarshal decodes JSON into
// the value v points to: a struct, a map, a slice, a string, an any... The
// payload is msgpack; a struct's fields are matched by their `msgpack`
// tags (else by their Go names), as Marshal names them when encoding.
func (m Message) Decode(v any) error {
	if err := Unmarshal(m.Payload, v); err != nil {
		return fmt.Errorf("decode the payload of %s/%s offset %d: %w", m.Queue, m.Partition, m.Offset, err)
	}
	return nil
}
