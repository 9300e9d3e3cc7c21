package ident

// cache.go owns the bounded, TTL'd memory caches (DID documents, handle
// verdicts): a map plus an LRU list under one mutex.

import (
	"container/list"
	"sync"
	"time"
)

// cacheEntry is one key's value; for the document cache a nil *Info marks
// it invalidated (the durable copy is stale too).
type cacheEntry[V any] struct {
	key     string
	val     V
	expires time.Time
}

type cache[V any] struct {
	mu  sync.Mutex
	max int
	// ttl is the longest an entry is put for: one expiring further ahead
	// of now was put while the wall clock ran ahead, and has expired.
	ttl   time.Duration
	order *list.List // front: most recently used
	items map[string]*list.Element
}

func newCache[V any](max int, ttl time.Duration) *cache[V] {
	return &cache[V]{max: max, ttl: ttl, order: list.New(), items: make(map[string]*list.Element)}
}

// get returns key's value and whether it has expired at now (or expires
// further ahead than ttl); ok is false when there is none.
func (c *cache[V]) get(key string, now time.Time) (val V, expired, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return val, false, false
	}
	e := el.Value.(*cacheEntry[V])
	c.order.MoveToFront(el)
	return e.val, !now.Before(e.expires) || e.expires.After(now.Add(c.ttl)), true
}

// put stores key's value until expires (at most ttl ahead), evicting the
// least recently used past max; it reports whether it evicted one.
func (c *cache[V]) put(key string, val V, expires time.Time) (evicted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*cacheEntry[V])
		e.val, e.expires = val, expires
		c.order.MoveToFront(el)
		return false
	}
	c.items[key] = c.order.PushFront(&cacheEntry[V]{key: key, val: val, expires: expires})
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.items, old.Value.(*cacheEntry[V]).key)
		evicted = true
	}
	return evicted
}

func (c *cache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
