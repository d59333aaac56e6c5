package protocol

// Completed is the ack item that completes m, a message pop delivered
// under a lease: it names the message by lease and offset, as revision 1.2
// says a client sends a popped message given to ack.
func (m Message) Completed() AckItem {
	off := m.Offset
	return AckItem{LeaseID: m.LeaseID, Offset: &off, Status: AckCompleted}
}

// Failed is the ack item that reports m failed: it is delivered again and
// its retry budget charged; reason is kept with it if it is dead-lettered.
// The reason is sent as given: one that is not UTF-8, or holds a NUL, makes
// the sidecar refuse the whole ack (invalid_argument), which its tests
// count on.
func (m Message) Failed(reason string) AckItem {
	off := m.Offset
	return AckItem{LeaseID: m.LeaseID, Offset: &off, Status: AckFailed, Error: reason}
}
