package archive

// durableCache is the writer's bounded memory of one family's durable
// values by DID (rev/, repo/). The writer is the family's only writer, so
// the cache is always coherent; when it fills up it is dropped and refilled
// from the store. On a store that had no row of the family at start it
// holds every row until it is first dropped (all): a miss is then "no
// row" without a read, so a bootstrap reads no such key for its first max
// accounts.
type durableCache[V any] struct {
	m   map[string]V
	max int
	all bool
}

func newDurableCache[V any](max int) durableCache[V] {
	return durableCache[V]{m: make(map[string]V), max: max}
}

// get returns did's cached value (found), or whether a miss means the
// store holds none (absent, without a read).
func (c *durableCache[V]) get(did string) (v V, found, absent bool) {
	if v, ok := c.m[did]; ok {
		return v, true, false
	}
	return v, false, c.all
}

// put caches did's durable value, dropping the whole cache when full.
func (c *durableCache[V]) put(did string, v V) {
	if len(c.m) >= c.max {
		clear(c.m)
		c.all = false
	}
	c.m[did] = v
}
