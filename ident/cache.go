package ident

// cache.go owns the bounded, TTL'd memory cache: a map plus an LRU list
// under one mutex.

import (
	"container/list"
	"sync"
	"time"
)

// cacheEntry is one DID's document; info nil marks it invalidated (the
// durable copy is stale too).
type cacheEntry struct {
	did     string
	info    *Info
	expires time.Time
}

type cache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front: most recently used
	items map[string]*list.Element
}

func newCache(max int) *cache {
	return &cache{max: max, order: list.New(), items: make(map[string]*list.Element)}
}

// get returns did's entry and whether it has expired at now; ok is false
// when there is none.
func (c *cache) get(did string, now time.Time) (info *Info, expired, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[did]
	if !ok {
		return nil, false, false
	}
	e := el.Value.(*cacheEntry)
	c.order.MoveToFront(el)
	return e.info, !now.Before(e.expires), true
}

// put stores did's entry, evicting the least recently used past max.
func (c *cache) put(did string, info *Info, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[did]; ok {
		e := el.Value.(*cacheEntry)
		e.info, e.expires = info, expires
		c.order.MoveToFront(el)
		return
	}
	c.items[did] = c.order.PushFront(&cacheEntry{did: did, info: info, expires: expires})
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.items, old.Value.(*cacheEntry).did)
	}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
