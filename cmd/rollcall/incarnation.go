package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/gossip"
)

// chooseIncarnation returns the incarnation the node named name starts as
// (node.Config.Incarnation), at clock time now: one past every earlier
// incarnation of the name it can learn of, and at least the clock
// (gossip.NextIncarnation). It reads the --data-dir state file, asks the
// members at --join what they know of the name (gossip.Probe), and writes
// the choice to the state file before the node announces anything.
//
// It fails when a live gateway already has the name (gossip's
// DuplicateError), when the state file is corrupt or cannot be written,
// and when the probe cannot bind the gossip address. When no member
// answers (the first gateway of a cluster, or its seeds are down) it goes
// on with the clock and the state file.
func (ac *agentConfig) chooseIncarnation(name string, now time.Time, log *zap.Logger) (uint64, error) {
	var path string
	var stored uint64
	if ac.DataDir != "" {
		if err := os.MkdirAll(ac.DataDir, 0o700); err != nil {
			return 0, fmt.Errorf("--data-dir: %w", err)
		}
		path = filepath.Join(ac.DataDir, gossip.IncarnationFileName)
		var err error
		if stored, err = gossip.ReadIncarnationFile(path); err != nil {
			return 0, fmt.Errorf("--data-dir: %w", err)
		}
	}
	var prior gossip.Prior
	if ac.Gossip.BindAddr != "" && len(ac.Gossip.Join) > 0 {
		cfg, err := ac.gossipConfig(name, log)
		if err != nil {
			return 0, err
		}
		prior, err = gossip.Probe(cfg)
		switch {
		case errors.Is(err, gossip.ErrNoMemberReached):
			log.Warn("no member answered before joining: the incarnation comes from the clock and --data-dir alone",
				zap.Strings("join", cfg.Join), zap.Error(err))
		case err != nil:
			return 0, err
		}
	}
	inc, err := gossip.NextIncarnation(now, stored, prior.Incarnation)
	if err != nil {
		return 0, err
	}
	if path != "" {
		if err := gossip.WriteIncarnationFile(path, inc); err != nil {
			return 0, fmt.Errorf("--data-dir: %w", err)
		}
	}
	fields := []zap.Field{zap.Uint64("incarnation", inc), zap.Uint64("stored", stored),
		zap.Uint64("cluster", prior.Incarnation), zap.Int("members_asked", prior.Reached)}
	if ahead := time.Duration(inc - uint64(max(now.UnixNano(), 0))); ahead > 0 {
		log.Warn("the incarnation is ahead of this clock: an earlier run of this gateway had a later clock",
			append(fields, zap.Duration("ahead", ahead))...)
	} else {
		log.Info("incarnation chosen", fields...)
	}
	return inc, nil
}
