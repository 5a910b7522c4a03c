package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/internal/tlsconf"
	"github.com/rollcall/rollcall/node"
)

// SIGHUP reloads the agent: the config file (and environment) are read
// again and every registered reloader runs, in the order registered. A
// reloader refreshes one part of the running agent and reports what
// changed; a failed reloader is logged and the others still run. A reload
// never ends a session and never stops the agent.
//
// Registering a part is one line:
//
//	reloads.add("tls", tlsStore.Reload, "tls-cert", "tls-key")
//
// The keys name the config settings the reloader applies; a changed
// setting that no reloader claims is logged as needing a restart.

// agentReloads builds the agent's reload registry with its first parts,
// the configuration itself and the log level, and, when the agent runs
// under main's signal handler, hooks it to SIGHUP (and logs a second
// shutdown signal). live is the configuration reloaders read; unhook
// detaches the signal hooks.
func agentReloads(ctx context.Context, args []string, ac *agentConfig, fs *flag.FlagSet, log *zap.Logger, level zap.AtomicLevel) (reloads *reloadRegistry, live *liveConfig, unhook func()) {
	live = &liveConfig{config: ac, values: effectiveConfig(fs, false), load: func() (*agentConfig, map[string]any, error) {
		ac, fs, _, err := loadAgentConfig(args, os.Environ(), io.Discard)
		if err == nil {
			err = ac.check()
		}
		if err != nil {
			return nil, nil, err
		}
		return ac, effectiveConfig(fs, false), nil
	}}
	reloads = newReloadRegistry(log)
	reloads.add("config", configReloader(live, reloads, log))
	reloads.add("log-level", logLevelReloader(live, level), "log-level")
	sig := signalHandlerFrom(ctx)
	if sig == nil {
		return reloads, live, func() {}
	}
	sig.onHangup(func() { _ = reloads.run() })
	sig.onSecondSignal(func(s os.Signal) {
		log.Error("second signal during the drain: exiting at once, sessions not yet written stay online at peers until their leases end", zap.Stringer("signal", s))
		_ = log.Sync()
	})
	return reloads, live, func() {
		sig.onHangup(nil)
		sig.onSecondSignal(nil)
	}
}

// reloadFunc refreshes one part of the running agent, returning a short
// description of each thing that changed (nothing: nil).
type reloadFunc func() (changed []string, err error)

type reloader struct {
	name   string
	keys   []string
	reload reloadFunc
}

// reloadRegistry holds the agent's reloaders. It is safe for concurrent
// use; runs are serialized.
type reloadRegistry struct {
	log *zap.Logger

	runMu sync.Mutex // held for a whole run

	mu        sync.Mutex // guards reloaders
	reloaders []reloader
}

func newReloadRegistry(log *zap.Logger) *reloadRegistry {
	return &reloadRegistry{log: log}
}

// add registers a reloader under name; keys are the config settings it
// applies.
func (r *reloadRegistry) add(name string, reload reloadFunc, keys ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reloaders = append(r.reloaders, reloader{name: name, keys: keys, reload: reload})
}

// reloadable reports whether a reloader applies config key.
func (r *reloadRegistry) reloadable(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rl := range r.reloaders {
		for _, k := range rl.keys {
			if k == key {
				return true
			}
		}
	}
	return false
}

// run runs every reloader in order, logging what each changed or its
// error, and returns the errors joined.
func (r *reloadRegistry) run() error {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	r.mu.Lock()
	list := append([]reloader(nil), r.reloaders...)
	r.mu.Unlock()

	r.log.Info("reloading (SIGHUP)")
	var errs []error
	changes := 0
	for _, rl := range list {
		changed, err := rl.reload()
		if err != nil {
			r.log.Error("reload failed; the running agent keeps its previous settings for this part", zap.String("part", rl.name), zap.Error(err))
			errs = append(errs, fmt.Errorf("%s: %w", rl.name, err))
		}
		if len(changed) > 0 {
			changes += len(changed)
			r.log.Info("reloaded", zap.String("part", rl.name), zap.Strings("changed", changed))
		}
	}
	r.log.Info("reload done", zap.Int("changes", changes), zap.Int("errors", len(errs)))
	return errors.Join(errs...)
}

// liveConfig is the agent's configuration as last loaded: at start, and
// again at each reload from the same command line and environment, so a
// setting given as a flag keeps its value (flags win over the file).
type liveConfig struct {
	load func() (*agentConfig, map[string]any, error) // the configuration and its printable values

	mu     sync.Mutex
	config *agentConfig
	values map[string]any
}

// current returns the configuration last loaded.
func (l *liveConfig) current() *agentConfig {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.config
}

// reload loads the configuration again and, if it passes every check,
// makes it current. It returns the settings whose values changed.
func (l *liveConfig) reload() ([]string, error) {
	ac, values, err := l.load()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var changed []string
	for k, v := range values {
		if fmt.Sprint(l.values[k]) != fmt.Sprint(v) {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)
	l.config, l.values = ac, values
	return changed, nil
}

// configReloader reloads the configuration itself; it runs first. Changed
// settings that no reloader applies are logged: they need a restart.
func configReloader(live *liveConfig, reloads *reloadRegistry, log *zap.Logger) reloadFunc {
	return func() ([]string, error) {
		changed, err := live.reload()
		if err != nil {
			return nil, fmt.Errorf("the configuration stays as it was: %w", err)
		}
		var restart []string
		for _, k := range changed {
			if !reloads.reloadable(k) {
				restart = append(restart, k)
			}
		}
		if len(restart) > 0 {
			log.Warn("changed settings take effect at the next restart", zap.Strings("settings", restart))
		}
		return changed, nil
	}
}

// logLevelReloader applies --log-level to the running logger.
func logLevelReloader(live *liveConfig, level zap.AtomicLevel) reloadFunc {
	return func() ([]string, error) {
		want, err := zapcore.ParseLevel(live.current().LogLevel)
		if err != nil {
			return nil, fmt.Errorf("--log-level: %w", err)
		}
		if old := level.Level(); old != want {
			level.SetLevel(want)
			return []string{fmt.Sprintf("log-level %s -> %s", old, want)}, nil
		}
		return nil, nil
	}
}

// keyringReloader makes this agent's gossip keyring what --keyring-file
// lists: it installs the file's new keys, makes its first key primary and
// removes keys the file no longer lists. It changes this agent only (each
// agent reloads its own file; `rollcall keys` changes every member at
// once). kr is nil when gossip is off or not encrypted.
func keyringReloader(live *liveConfig, kr *memberlist.Keyring) reloadFunc {
	return func() ([]string, error) {
		path := live.current().KeyringFile
		if path == "" {
			return nil, nil
		}
		if kr == nil {
			return nil, errors.New("gossip encryption is off in the running agent: --keyring-file takes effect at the next start")
		}
		file, err := gossip.LoadKeyring(path)
		if err != nil {
			return nil, fmt.Errorf("--keyring-file: %w", err)
		}
		return syncKeyring(kr, file.GetKeys())
	}
}

// syncKeyring installs want's keys in kr, makes want[0] primary and removes
// the keys want does not list. Keys are never named in what it returns.
func syncKeyring(kr *memberlist.Keyring, want [][]byte) ([]string, error) {
	has := func(set [][]byte, k []byte) bool {
		for _, s := range set {
			if bytes.Equal(s, k) {
				return true
			}
		}
		return false
	}
	installed := kr.GetKeys()
	var changed []string
	added, removed := 0, 0
	for _, k := range want {
		if !has(installed, k) {
			if err := kr.AddKey(k); err != nil {
				return changed, fmt.Errorf("install gossip key: %w", err)
			}
			added++
		}
	}
	if added > 0 {
		changed = append(changed, fmt.Sprintf("%d gossip key(s) installed", added))
	}
	if !bytes.Equal(kr.GetPrimaryKey(), want[0]) {
		if err := kr.UseKey(want[0]); err != nil {
			return changed, fmt.Errorf("use gossip key: %w", err)
		}
		changed = append(changed, "primary gossip key changed")
	}
	for _, k := range installed {
		if !has(want, k) {
			if err := kr.RemoveKey(k); err != nil {
				return changed, fmt.Errorf("remove gossip key: %w", err)
			}
			removed++
		}
	}
	if removed > 0 {
		changed = append(changed, fmt.Sprintf("%d gossip key(s) removed", removed))
	}
	return changed, nil
}

// tlsReloader re-reads the certificate, key and client CA files of the TLS
// ports (the paths themselves need a restart). New connections get the new
// certificate; open ones keep theirs. A failed read keeps the old one.
func tlsReloader(srv *tlsconf.Server) reloadFunc {
	return func() ([]string, error) {
		changed, err := srv.Reload()
		if err != nil || !changed {
			return nil, err
		}
		return []string{"tls certificate: " + srv.Info().String()}, nil
	}
}

// limitKeys are the settings limitsReloader applies to a running node.
func limitKeys() []string {
	return []string{"request-rate", "request-burst", "send-rate", "send-burst",
		"meta-rate", "meta-burst", "max-connections", "max-connections-per-ip", "max-sessions-per-user",
		"user-hello-rate", "user-hello-burst", "ip-hello-rate", "ip-hello-burst",
		"track-rate", "track-burst", "max-tracked-per-connection"}
}

// limitsReloader applies the current configuration's rates and caps to the
// running node: open sessions get the new rates, nobody is dropped.
func limitsReloader(live *liveConfig, n *node.Node) reloadFunc {
	return func() ([]string, error) {
		cfg, err := live.current().nodeConfig(zap.NewNop())
		if err != nil {
			return nil, err
		}
		changed, err := n.SetLimits(cfg.Limits())
		// A new --max-connections past the open-file limit says so.
		if err == nil && slices.ContainsFunc(changed, func(c string) bool { return strings.HasPrefix(c, "MaxConnections ") }) {
			if msg := connectionCap(n, n.Limits().MaxConnections); msg != "" {
				changed = append(changed, msg)
			}
		}
		return changed, err
	}
}
