//go:build crashpoint

package crashpoint

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Built reports whether this binary can fire crash points.
const Built = true

// fromEnv arms the crash point spec names.
func fromEnv(spec string) (*Set, error) {
	s, err := Parse(spec)
	if s != nil {
		s.kill = killSelf
		if s.hold {
			// Registered now, so a release sent early is kept, never the
			// default action of SIGUSR1 (which ends the process).
			release := make(chan os.Signal, 1)
			signal.Notify(release, syscall.SIGUSR1)
			name := s.name
			s.block = func() {
				fmt.Fprintf(os.Stderr, "crashpoint: holding at %s\n", name)
				<-release
				fmt.Fprintf(os.Stderr, "crashpoint: released at %s\n", name)
			}
		}
	}
	return s, err
}

func killSelf() {
	fmt.Fprintf(os.Stderr, "crashpoint: SIGKILL\n")
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
