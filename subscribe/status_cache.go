package subscribe

// status_cache.go owns StatusCache: the /status report built at most once
// per TTL, whatever the request rate.

import (
	"sync"
	"time"
)

// DefaultStatusTTL is how long one built status report is served. Building
// one reads the store; unthrottled, 3,252 requests/s cost 105% CPU.
const DefaultStatusTTL = time.Second

// StatusCache serves the report Build returns for TTL after building it,
// while Key returns what it returned then (the phase: a report is never
// served across a phase change, and a poller that sees "bootstrap" knows the
// process had not left it when the request came). Callers that arrive while
// a build for their key runs wait for it and share its result, so a burst of
// requests costs one build. While Fatal reports an error the cache is
// bypassed (every call builds), so a fatal error shows at once. The liveness
// and readiness probes do not go through it.
type StatusCache[K comparable] struct {
	Build func() any
	Key   func() K         // nil: one key
	Fatal func() error     // nil: never fatal
	TTL   time.Duration    // default DefaultStatusTTL
	Now   func() time.Time // default time.Now

	mu     sync.Mutex
	val    any
	key    K
	at     time.Time // when the build that made val started
	have   bool
	flight *statusFlight[K] // the latest build running now, nil when none
}

type statusFlight[K comparable] struct {
	key  K
	done chan struct{}
	val  any
	ok   bool // false if Build panicked
}

// CacheStatus caches build per key with the default TTL and clock; its Get
// is a Config.StatusJSON.
func CacheStatus[K comparable](build func() any, fatal func() error, key func() K) func() any {
	return (&StatusCache[K]{Build: build, Fatal: fatal, Key: key}).Get
}

// Get returns the report: the cached one while it is younger than the TTL
// and of the current key, else the result of a new build, one per key at a
// time.
func (c *StatusCache[K]) Get() any {
	if c.Fatal != nil && c.Fatal() != nil {
		c.mu.Lock()
		c.have = false
		c.mu.Unlock()
		return c.Build()
	}
	var k K
	if c.Key != nil {
		k = c.Key()
	}
	c.mu.Lock()
	for {
		if c.have && c.key == k && c.now().Sub(c.at) < c.ttl() {
			v := c.val
			c.mu.Unlock()
			return v
		}
		f := c.flight
		if f == nil || f.key != k {
			break
		}
		c.mu.Unlock()
		<-f.done
		if f.ok {
			return f.val
		}
		c.mu.Lock()
	}
	f := &statusFlight[K]{key: k, done: make(chan struct{})}
	c.flight = f
	start := c.now()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.flight == f { // not overtaken by a build for a newer key
			if f.ok {
				c.val, c.key, c.at, c.have = f.val, k, start, true
			}
			c.flight = nil
		}
		c.mu.Unlock()
		close(f.done)
	}()
	f.val = c.Build()
	f.ok = true
	return f.val
}

func (c *StatusCache[K]) ttl() time.Duration {
	if c.TTL > 0 {
		return c.TTL
	}
	return DefaultStatusTTL
}

func (c *StatusCache[K]) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
