package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The agent's flag reference in docs/operations/configuration.md is
// generated from its FlagSet: one table per section of agentFlagSet, a row
// per flag with its name, its default and its usage text. Rewrite it after
// changing a flag with
//
//	go test ./cmd/rollcall -run TestFlagTableMatchesTheFlags -update-flag-docs
var updateFlagDocs = flag.Bool("update-flag-docs", false, "rewrite the agent's flag reference in docs/operations/configuration.md from its flags")

const (
	flagDocPath  = "../../docs/operations/configuration.md"
	flagDocBegin = "<!-- BEGIN agent flags: generated from agentFlagSet (cmd/rollcall/agentconfig.go) by `go test ./cmd/rollcall -run TestFlagTableMatchesTheFlags -update-flag-docs`; edit the flags' usage texts, not this table -->"
	flagDocEnd   = "<!-- END agent flags -->"
)

var (
	// usageDefault is a usage text's closing "(default: ...)", which
	// describes an empty default.
	usageDefault = regexp.MustCompile(` ?\(default: ([^()]*(?:\([^()]*\)[^()]*)*)\)$`)
	// flagRef is a flag named in a usage text, and commandRef a rollcall
	// command in quotes: both are set as code in the docs.
	flagRef    = regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	commandRef = regexp.MustCompile(`'(rollcall [a-z-]+)'`)
)

// flagTables renders the flag reference of fs: per section, its title and a
// table of its flags.
func flagTables(fs *flag.FlagSet, sections []flagSection) string {
	var b strings.Builder
	for i, sec := range sections {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s\n\n| flag | default | what it does |\n|---|---|---|\n", sec.Title)
		for _, name := range sec.Names {
			f := fs.Lookup(name)
			text, def := f.Usage, "`"+f.DefValue+"`"
			if m := usageDefault.FindStringSubmatchIndex(text); m != nil {
				def = text[m[2]:m[3]]
				text = text[:m[0]]
			} else if f.DefValue == "" {
				def = "none"
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", name, markdownText(def), markdownText(text))
		}
	}
	return b.String()
}

// markdownText sets the flags and commands a usage text names as code.
func markdownText(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = flagRef.ReplaceAllString(s, "`$0`")
	return commandRef.ReplaceAllString(s, "`$1`")
}

// The flag reference in docs/operations/configuration.md is what the
// agent's FlagSet says: the same flags, defaults and texts, in the same
// sections; and no other table of the page names a flag the agent lacks.
func TestFlagTableMatchesTheFlags(t *testing.T) {
	text, err := os.ReadFile(flagDocPath)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(text, []byte(flagDocBegin)), bytes.Index(text, []byte(flagDocEnd))
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the markers of the generated flag reference:\n%s\n%s", flagDocPath, flagDocBegin, flagDocEnd)
	}
	ac := defaultAgentConfig()
	fs, sections := agentFlagSet(&ac, nil)
	want := flagDocBegin + "\n\n" + flagTables(fs, sections) + "\n"
	got := string(text[begin:end])
	if *updateFlagDocs {
		out := append(append(append([]byte{}, text[:begin]...), want...), text[end:]...)
		if err := os.WriteFile(flagDocPath, out, 0o644); err != nil {
			t.Fatal(err)
		}
		got = want
	}
	if got != want {
		gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			var g, w string
			if i < len(gotLines) {
				g = gotLines[i]
			}
			if i < len(wantLines) {
				w = wantLines[i]
			}
			if g != w {
				t.Errorf("%s: the flag reference differs from the agent's flags from its line %d on:\n doc:   %s\n flags: %s", flagDocPath, i+1, g, w)
				break
			}
		}
		t.Errorf("rewrite it: go test ./cmd/rollcall -run TestFlagTableMatchesTheFlags -update-flag-docs")
	}

	// Every flag a table of the page names (the limits table's too) is one
	// of the agent's, and the actions have their rows.
	rows := map[string]bool{}
	for _, line := range strings.Split(string(text), "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 4 {
			continue
		}
		for _, c := range cells[1:3] { // a flag table's first column, the limits table's second
			if c = strings.TrimSpace(c); flagCell.MatchString(c) {
				for _, m := range flagName.FindAllStringSubmatch(c, -1) {
					rows[m[1]] = true
				}
			}
		}
	}
	for _, name := range []string{"print-config", "validate-config"} {
		if !rows[name] {
			t.Errorf("%s has no row for --%s", flagDocPath, name)
		}
		fs.Bool(name, false, "")
	}
	for name := range rows {
		if fs.Lookup(name) == nil {
			t.Errorf("%s has a row for --%s, which the agent does not have", flagDocPath, name)
		}
	}
}

// flagCell matches a table cell that names flags and nothing else
// ("`--request-rate`, `--request-burst`"), and flagName each name in it.
var (
	flagCell = regexp.MustCompile("^(`--[a-z][a-z0-9-]*`(, )?)+$")
	flagName = regexp.MustCompile("`--([a-z][a-z0-9-]*)`")
)
