//go:build !crashpoint

package crashpoint

import "fmt"

// Built reports whether this binary can fire crash points.
const Built = false

// fromEnv refuses a crash point: this build cannot fire one.
func fromEnv(spec string) (*Set, error) {
	if spec == "" {
		return nil, nil
	}
	return nil, fmt.Errorf("crashpoint: %s=%q is set, but this build has no crash points (only a test binary built with -tags crashpoint has them); unset it", EnvVar, spec)
}
