package main

// docs_flags_test.go keeps the flag reference of docs/operating.md generated
// from the CLI definitions (commands()): every flag of every subcommand with
// its environment variable, default and meaning. The section between the
// BEGIN/END markers is compared with the rendering; -update rewrites it:
//
//	go test ./cmd/backstream -run TestOperatingDocsFlags -update

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated flag section of docs/operating.md")

const (
	docsFlagsBegin = "<!-- BEGIN FLAGS: generated from the CLI by `go test ./cmd/backstream -run TestOperatingDocsFlags -update`; do not edit by hand -->"
	docsFlagsEnd   = "<!-- END FLAGS -->"
)

// renderFlagDocs renders every subcommand's flags as Markdown tables, in
// the order of commands().
func renderFlagDocs(cmds []*command) string {
	var b strings.Builder
	cell := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
	}
	for i, c := range cmds {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "### `backstream %s`\n\n%s.\n\n", c.name, cell(c.summary))
		b.WriteString("| flag | environment variable | default | meaning |\n| --- | --- | --- | --- |\n")
		newFlagSet(c, io.Discard).VisitAll(func(f *flag.Flag) {
			def := "`" + f.DefValue + "`"
			if f.DefValue == "" {
				def = "(empty)"
			}
			fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", f.Name, envName(f.Name), cell(def), cell(f.Usage))
		})
	}
	return b.String()
}

func TestOperatingDocsFlags(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "operating.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, docsFlagsBegin)
	end := strings.Index(doc, docsFlagsEnd)
	if start < 0 || end < start {
		t.Fatalf("%s: the markers of the generated flag section are missing:\n%s\n...\n%s", path, docsFlagsBegin, docsFlagsEnd)
	}
	want := renderFlagDocs(commands())
	got := strings.TrimSpace(doc[start+len(docsFlagsBegin) : end])
	if got == strings.TrimSpace(want) {
		return
	}
	if *updateDocs {
		doc = doc[:start+len(docsFlagsBegin)] + "\n\n" + want + "\n" + doc[end:]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the flag section of %s", path)
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(strings.TrimSpace(want), "\n")
	for i := 0; i < max(len(gl), len(wl)); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("%s: the flag section differs from the CLI at line %d:\n docs: %s\n  cli: %s\n"+
				"run: go test ./cmd/backstream -run TestOperatingDocsFlags -update", path, i+1, g, w)
		}
	}
}

// TestOperatingDocsFlagsCoverEveryFlag: the rendering itself names every
// flag and variable of every subcommand (guards renderFlagDocs).
func TestOperatingDocsFlagsCoverEveryFlag(t *testing.T) {
	out := renderFlagDocs(commands())
	for _, c := range commands() {
		if !strings.Contains(out, "### `backstream "+c.name+"`") {
			t.Errorf("no section for %s", c.name)
		}
		newFlagSet(c, io.Discard).VisitAll(func(f *flag.Flag) {
			if !strings.Contains(out, "| `--"+f.Name+"` | `"+envName(f.Name)+"` |") {
				t.Errorf("%s: --%s missing", c.name, f.Name)
			}
		})
	}
}
