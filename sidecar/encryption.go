package sidecar

import (
	"errors"

	"github.com/google/uuid"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/crypt"
	"github.com/queenside/queenside/sidecar/store"
)

// Payloads of a queue with encryptPayloads are sealed here, before they are
// stored or spooled, and opened here, before they are answered: neither
// PostgreSQL nor the pod's disk holds their plaintext. A sealed payload is
// a crypt record, which names its key and starts with a byte no msgpack
// value starts with, so each stored message says whether it is sealed,
// whatever the queue's setting is now.

// seal seals m's payload when its queue's payloads are encrypted, bound to
// the queue and the message id.
func (s *Server) seal(m *store.Message) *protocol.Error {
	if !s.control.encrypted(m.Queue) {
		return nil
	}
	sealed, err := s.opts.Keys.SealRecord(m.Payload, m.Queue, m.MessageID)
	if errors.Is(err, crypt.ErrKeyMissing) {
		return protocol.Errorf(protocol.CodeKeyMissing,
			"queue %s encrypts its payloads and this sidecar has no key to seal them with: start it with --encryption-keys", m.Queue)
	}
	if err != nil {
		return protocol.Errorf(protocol.CodeInternal, "seal a payload of %s: %v", m.Queue, err)
	}
	m.Payload = sealed
	return nil
}

// openPayload returns a stored payload's plaintext: a sealed one is opened
// with the key it names, and refused if it does not authenticate.
func (s *Server) openPayload(payload []byte, queue, messageID string) ([]byte, *protocol.Error) {
	if !crypt.IsPacked(payload) {
		return payload, nil
	}
	id, err := uuid.Parse(messageID)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "message %s of %s: %v", messageID, queue, err)
	}
	plain, err := s.opts.Keys.OpenRecord(payload, queue, id)
	switch {
	case errors.Is(err, crypt.ErrKeyMissing):
		return nil, protocol.Errorf(protocol.CodeKeyMissing,
			"message %s of %s is sealed under a key this sidecar was not given (--encryption-keys)", messageID, queue)
	case err != nil:
		s.log.Error("a sealed payload failed authentication: it was altered, or belongs to another message", "queue", queue, "messageId", messageID)
		return nil, protocol.Errorf(protocol.CodeInternal,
			"message %s of %s: the sealed payload does not authenticate (altered, or moved from another message); it is not returned", messageID, queue)
	}
	return plain, nil
}

// openMessages opens the payloads of delivered messages in place; the
// first that cannot be opened fails them all.
func (s *Server) openMessages(msgs []protocol.Message) *protocol.Error {
	for i := range msgs {
		m := &msgs[i]
		plain, perr := s.openPayload(m.Payload, m.Queue, m.MessageID)
		if perr != nil {
			return perr
		}
		m.Payload = plain
	}
	return nil
}
