package verify

import (
	"testing"
	"time"
)

// A fault's window on the pushes counts the requests answered in it, with
// their whole wait, and a request still unanswered when it closes with its
// wait so far; a request answered before it opened is not its.
func TestPushWatchWindow(t *testing.T) {
	w := newPushWatch()
	early, slow, stuck := &producer{}, &producer{}, &producer{}
	now := time.Now()
	w.sent(early, now.Add(-time.Second))
	w.answered(early, now.Add(-500*time.Millisecond), 7)
	w.sent(slow, now.Add(-3*time.Second))
	win := w.open()
	w.answered(slow, time.Now(), 5)
	w.sent(stuck, time.Now().Add(-time.Second))
	longest, buffered := w.close(win)
	if buffered != 5 {
		t.Errorf("%d items buffered in the window, want the 5 answered in it", buffered)
	}
	if longest < 3*time.Second || longest > 4*time.Second {
		t.Errorf("longest wait %v, want the slow request's 3 s", longest)
	}
	w.answered(stuck, time.Now(), 9) // after the window: not counted
	if longest2, buffered2 := w.close(w.open()); buffered2 != 0 || longest2 != 0 {
		t.Errorf("an empty window: longest %v, %d buffered", longest2, buffered2)
	}
}
