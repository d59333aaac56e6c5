package sidecar

import (
	"testing"

	"github.com/queenside/queenside/sidecar/store"
)

// A read of the control state that began before another one and ends
// after it is not applied over it: a recheck under way when a configure
// committed must not take back what the configure's own read applied
// (a queue just made to seal its payloads would store them in clear).
func TestAnOlderReadOfTheControlStateIsNotApplied(t *testing.T) {
	c := newControl()
	recheck := c.begin()     // began before the configure committed
	afterCommit := c.begin() // the configure's own read
	sealed := store.Control{Paused: map[string]bool{}, Encrypted: map[string]bool{"sec": true}}
	if !c.set(afterCommit, sealed) || !c.encrypted("sec") {
		t.Fatal("the configure's read was not applied")
	}
	if c.set(recheck, store.Control{Paused: map[string]bool{}, Encrypted: map[string]bool{}}) || !c.encrypted("sec") {
		t.Fatal("the older read took the sealing back")
	}
	if !c.set(c.begin(), store.Control{Paused: map[string]bool{}, Encrypted: map[string]bool{}}) || c.encrypted("sec") {
		t.Fatal("a newer read was not applied")
	}
}
