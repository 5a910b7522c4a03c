// Package datadriven is a small data-driven test runner in the style of
// cockroachdb/datadriven (as used by etcd-io/raft's interaction tests),
// shared by the packages whose tests read scripts from testdata/.
package datadriven

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A script is a sequence of
// directives, each followed by a line "----" and the expected output:
//
//	# comments and blank lines between directives are kept on rewrite
//	connect a user=u device=d epoch=1
//	----
//	a#1 v1 u/d epoch=1 seq=1 active available
//
// The expected output ends at the first blank line, so outputs never hold
// blank lines. Run with -rewrite to regenerate every expected output from the
// current behaviour, then review the diff.

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of data-driven tests in testdata/")

// Cmd is one parsed directive.
type Cmd struct {
	Pos  string // file:line, for messages
	Line string // the directive as written
	Name string
	Args []string // positional words and key=value pairs, in order
	want string   // expected output, without a trailing newline
}

// Arg returns the value of key=value, and whether it was present.
func (c *Cmd) Arg(key string) (string, bool) {
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Positional returns the words that are not key=value pairs.
func (c *Cmd) Positional() []string {
	var out []string
	for _, a := range c.Args {
		if !strings.Contains(a, "=") {
			out = append(out, a)
		}
	}
	return out
}

// file is a parsed script: directives interleaved with the text (comments,
// blank lines) that separates them, so a rewrite preserves it.
type file struct {
	path    string
	preface []string // text before each command, by command index
	cmds    []Cmd
	tail    []string // text after the last command
}

func parse(t *testing.T, path string) *file {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	df := &file{path: path}
	var pending []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trim := strings.TrimSpace(l)
		if trim == "" || strings.HasPrefix(trim, "#") {
			pending = append(pending, l)
			continue
		}
		c := Cmd{Pos: fmt.Sprintf("%s:%d", filepath.Base(path), i+1), Line: trim}
		fields := strings.Fields(trim)
		c.Name, c.Args = fields[0], fields[1:]
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			t.Fatalf("%s: directive %q is not followed by ----", c.Pos, trim)
		}
		i += 2
		var want []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			want = append(want, lines[i])
		}
		i-- // let the loop see the blank line (or the end)
		c.want = strings.Join(want, "\n")
		df.preface = append(df.preface, strings.Join(pending, "\n"))
		pending = nil
		df.cmds = append(df.cmds, c)
	}
	df.tail = pending
	return df
}

// Run runs every directive of the script at path through handle,
// comparing (or, with -rewrite, replacing) the expected output.
func Run(t *testing.T, path string, handle func(t *testing.T, c *Cmd) string) {
	t.Helper()
	df := parse(t, path)
	var out strings.Builder
	for i := range df.cmds {
		c := &df.cmds[i]
		got := strings.TrimRight(handle(t, c), "\n")
		if got == "" {
			got = "ok"
		}
		if strings.Contains(got, "\n\n") {
			t.Fatalf("%s: output of %q holds a blank line:\n%s", c.Pos, c.Line, got)
		}
		if *rewrite {
			if i > 0 || df.preface[i] != "" {
				out.WriteString(df.preface[i])
				out.WriteString("\n")
			}
			fmt.Fprintf(&out, "%s\n----\n%s\n", c.Line, got)
			continue
		}
		if got != c.want {
			t.Errorf("%s: %s\nwant:\n%s\ngot:\n%s", c.Pos, c.Line, c.want, got)
		}
	}
	if *rewrite {
		for _, l := range df.tail {
			out.WriteString(l)
			out.WriteString("\n")
		}
		text := strings.TrimRight(out.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
