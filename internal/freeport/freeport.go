// Package freeport gives tests a loopback address to hand a process that
// listens on it. The port is one nobody listens on at the moment of the
// call, taken below the kernel's ephemeral range: a port inside it, freed
// and then handed on, can be taken meanwhile by any outgoing connection
// of the machine (a test's HTTP clients, another test's process), and the
// process then fails "address already in use". Below the range only
// another listener can take it.
//
// Test code only: no production package imports it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// rangeFile holds the ephemeral range on Linux ("low<TAB>high").
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// lowest is the lowest port handed out: above the well-known and most
// registered service ports.
const lowest = 10000

// Addr returns "127.0.0.1:<port>", a port free a moment ago below the
// ephemeral range (or anywhere, from the kernel, when the range leaves no
// room below it).
func Addr() (string, error) {
	top := ephemeralLow()
	for range 200 {
		if top <= lowest {
			break
		}
		p := lowest + rand.IntN(top-lowest)
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			addr := ln.Addr().String()
			ln.Close()
			return addr, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("freeport: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// ephemeralLow is the lowest port of the kernel's ephemeral range
// (32768, Linux's default, when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}
