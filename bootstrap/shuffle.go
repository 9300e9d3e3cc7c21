package bootstrap

// shuffle.go owns dispatch order (E2): the repos of a listRepos page are
// dispatched in a random order, so consecutive jobs rarely hit one PDS.

import "math/rand/v2"

// Shuffle permutes dids in place, uniformly (Fisher–Yates) from rng.
func Shuffle(dids []string, rng *rand.Rand) {
	rng.Shuffle(len(dids), func(i, j int) { dids[i], dids[j] = dids[j], dids[i] })
}
