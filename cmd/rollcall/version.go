package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/rollcall/rollcall/node"
)

// version is set at build time with -ldflags "-X main.version=..." (make
// build passes `git describe --always --dirty`). Empty: the module version
// the go command stamped, or "dev".
var version string

// buildInfo is what `rollcall version` prints.
type buildInfo struct {
	Version   string // release or git describe; "dev" when unknown
	Revision  string // VCS commit, empty when built outside a checkout
	Time      string // commit time (RFC 3339), empty when unknown
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string
	Protocol  int // node.ProtocolVersion
}

// readBuildInfo gathers the version from the linker flag and from the build
// information the go command embeds.
func readBuildInfo() buildInfo {
	bi := buildInfo{Version: version, GoVersion: runtime.Version(), Protocol: node.ProtocolVersion}
	info, ok := debug.ReadBuildInfo()
	if ok {
		if bi.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			bi.Version = info.Main.Version
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
