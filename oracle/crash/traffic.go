package crash

// traffic.go owns a traffic driver the harness can stop: live events through
// oracle.Network.Emit (world mutation and firehose append under the
// network's one lock), for a network started with Traffic none. A random
// kill chain runs traffic exactly while it kills, so every kill lands before
// convergence, and convergence follows the last kill without waiting for a
// fixed event budget.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// Traffic emits a seeded stream of world mutations at a fixed rate until
// Stop.
type Traffic struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	n      atomic.Int64
	err    atomic.Pointer[error]
}

// StartTraffic starts emitting mode traffic (world.TrafficBasic or
// world.TrafficFull) on net at rate events per second, drawn from seed.
// The network must have been started with Traffic none.
func StartTraffic(net *oracle.Network, mode world.TrafficMode, seed int64, rate float64) *Traffic {
	gen := net.World().NewTraffic(mode, seed)
	ctx, cancel := context.WithCancel(context.Background())
	tr := &Traffic{cancel: cancel}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := net.Emit(func(*world.World) (world.Event, error) { return gen.Next() }); err != nil {
				err = fmt.Errorf("crash: traffic: %w", err)
				tr.err.Store(&err)
				return
			}
			tr.n.Add(1)
		}
	}()
	return tr
}

// Stop stops the driver and waits for it; it returns the error that ended
// it early, if any.
func (tr *Traffic) Stop() error {
	tr.cancel()
	tr.wg.Wait()
	if p := tr.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Events is the number of events emitted so far.
func (tr *Traffic) Events() int64 { return tr.n.Load() }
