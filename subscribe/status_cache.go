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

// StatusCache serves the report Build returns for TTL after building it.
// Callers that arrive while a build runs wait for it and share its result,
// so a burst of requests costs one build. While Fatal reports an error the
// cache is bypassed (every call builds), so a fatal error shows at once.
// The liveness and readiness probes do not go through it.
type StatusCache struct {
	Build func() any
	Fatal func() error     // nil: never fatal
	TTL   time.Duration    // default DefaultStatusTTL
	Now   func() time.Time // default time.Now

	mu     sync.Mutex
	val    any
	at     time.Time // when the build that made val started
	have   bool
	flight *statusFlight // the build running now, nil when none
}

type statusFlight struct {
	done chan struct{}
	val  any
	ok   bool // false if Build panicked
}

// CacheStatus caches build with the default TTL and clock; its Get is a
// Config.StatusJSON.
func CacheStatus(build func() any, fatal func() error) func() any {
	return (&StatusCache{Build: build, Fatal: fatal}).Get
}

// Get returns the report: the cached one while it is younger than the TTL,
// else the result of a new build, one at a time.
func (c *StatusCache) Get() any {
	if c.Fatal != nil && c.Fatal() != nil {
		c.mu.Lock()
		c.have = false
		c.mu.Unlock()
		return c.Build()
	}
	c.mu.Lock()
	for {
		if c.have && c.now().Sub(c.at) < c.ttl() {
			v := c.val
			c.mu.Unlock()
			return v
		}
		f := c.flight
		if f == nil {
			break
		}
		c.mu.Unlock()
		<-f.done
		if f.ok {
			return f.val
		}
		c.mu.Lock()
	}
	f := &statusFlight{done: make(chan struct{})}
	c.flight = f
	start := c.now()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if f.ok {
			c.val, c.at, c.have = f.val, start, true
		}
		c.flight = nil
		c.mu.Unlock()
		close(f.done)
	}()
	f.val = c.Build()
	f.ok = true
	return f.val
}

func (c *StatusCache) ttl() time.Duration {
	if c.TTL > 0 {
		return c.TTL
	}
	return DefaultStatusTTL
}

func (c *StatusCache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
