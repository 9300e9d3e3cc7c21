package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The repository itself scans clean, and the heavy tests CI must not skip
// are found where they live.
func TestRepositoryListed(t *testing.T) {
	pkgs, err := scan("../..")
	if err != nil {
		t.Fatal(err)
	}
	for dir, name := range map[string]string{
		"oracle/crash": "TestServeBootstrapSurvivesSIGKILL",
		"node":         "TestLifecycleCommitFaults",
		"bootstrap":    "TestEnumerationResumesFromCheckpoint",
	} {
		if !slices.Contains(pkgs[dir], name) {
			t.Errorf("%s: %v, want %s listed", dir, pkgs[dir], name)
		}
	}
}

func TestScanRules(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // listed tests, or nil when scan must fail
		wantErr   string
	}{
		{"long", `func TestHeavy(t *testing.T) { citest.Long(t, "big"); work() }
func TestQuick(t *testing.T) { work() }`, []string{"TestHeavy"}, ""},
		{"long in a subtest", `func TestHeavy(t *testing.T) { t.Run("x", func(t *testing.T) { citest.Long(t, "big") }) }`, []string{"TestHeavy"}, ""},
		{"shrinks under -short", `func TestShrinks(t *testing.T) { n := 100; if testing.Short() { n = 10 }; work(n) }`, nil, ""},
		{"bare skip", `func TestHeavy(t *testing.T) {
	if testing.Short() {
		t.Skip("big")
	}
}`, nil, "x_test.go:3:2"},
		{"bare skipf", `func TestHeavy(t *testing.T) { if testing.Short() { t.Skipf("%d", 1) } }`, nil, "without citest.Long"},
		{"long in a helper", `func heavy(t *testing.T) { citest.Long(t, "big") }
func TestHeavy(t *testing.T) { heavy(t) }`, nil, "outside a test function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "pkg")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			src := "package pkg\n" + tc.src + "\n"
			if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			pkgs, err := scan(root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("scan: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pkgs["pkg"], tc.want) {
				t.Fatalf("listed %v, want %v", pkgs["pkg"], tc.want)
			}
		})
	}
}
