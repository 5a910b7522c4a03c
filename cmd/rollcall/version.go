package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/rollcall/rollcall/protocol"
)

// Set at build time by make build and make image from git, with -ldflags
// "-X main.version=... -X main.revision=...": the go command's own VCS
// stamp is missing in a git worktree and with -buildvcs=false. Empty: what
// debug.ReadBuildInfo holds (the module version, vcs.revision, vcs.time,
// vcs.modified).
var (
	version    string // git describe --always --dirty
	revision   string // git rev-parse HEAD
	commitTime string // the commit's time, RFC 3339
	modified   string // "true" when the work tree had uncommitted changes
)

// buildInfo is what `rollcall version` prints.
type buildInfo struct {
	Version   string // release or git describe; "dev" when unknown
	Revision  string // VCS commit, empty when built outside a checkout
	Time      string // commit time (RFC 3339), empty when unknown
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string
	Protocol  int // protocol.Version
}

// readBuildInfo gathers the version from the linker flag and from the build
// information the go command embeds.
func readBuildInfo() buildInfo {
	bi := buildInfo{GoVersion: runtime.Version(), Protocol: protocol.Version}
	if info, ok := debug.ReadBuildInfo(); ok {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			bi.Version = v
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.Revision = s.Value
			case "vcs.time":
				bi.Time = s.Value
			case "vcs.modified":
				bi.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		bi.Version = version
	}
	if revision != "" {
		bi.Revision, bi.Time, bi.Modified = revision, commitTime, modified == "true"
	}
	if bi.Version == "" {
		bi.Version = "dev"
	}
	return bi
}

func (bi buildInfo) write(w io.Writer) error {
	rev := bi.Revision
	switch {
	case rev == "":
		rev = "unknown (not built from a git checkout)"
	case bi.Modified:
		rev += " (modified: uncommitted changes)"
	}
	t := bi.Time
	if t == "" {
		t = "unknown"
	}
	_, err := fmt.Fprintf(w, "rollcall %s\nrevision: %s\ncommit time: %s\ngo: %s\nprotocol: %d\n",
		bi.Version, rev, t, bi.GoVersion, bi.Protocol)
	return err
}

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments: %q", args)
	}
	return readBuildInfo().write(stdout)
}
