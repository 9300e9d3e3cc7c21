// Package human formats counts, byte sizes and durations for people: the
// text report of `backstream status` and log lines an operator reads. The
// JSON reports keep raw numbers; this package is only for text.
package human
