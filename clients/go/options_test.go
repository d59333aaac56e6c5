package queenside_test

import (
	"context"
	"testing"

	queenside "github.com/queenside/queenside/clients/go"
)

// Every option goes to the sidecar and comes back, maxDeliveries
// (revision 1.2) and the flags of revision 1.1 included.
func TestConfigureRoundTripsEveryOption(t *testing.T) {
	c := dial(t, startSidecar(t))
	ctx := context.Background()
	opts := queenside.DefaultQueueOptions()
	opts.MaxDeliveries, opts.ConsumptionPaused, opts.RetryLimit = 3, true, 5
	got, err := c.Configure(ctx, "poison", opts)
	if err != nil || got != opts {
		t.Fatalf("configure: %+v, %v; want %+v", got, err, opts)
	}
	qs, err := c.Queues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Options != opts {
		t.Fatalf("queues: %+v, %v", qs, err)
	}
	// configure replaces every option: without it, maxDeliveries is 0 again.
	if got, err := c.Configure(ctx, "poison", queenside.DefaultQueueOptions()); err != nil || got.MaxDeliveries != 0 || got.ConsumptionPaused {
		t.Fatalf("configure with the defaults: %+v, %v", got, err)
	}
}
