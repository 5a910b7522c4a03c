package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// newLiveConfig loads the agent's configuration from args as runAgent does.
func newLiveConfig(t *testing.T, args []string) *liveConfig {
	t.Helper()
	load := func() (*agentConfig, map[string]any, error) {
		af, fs, _, err := loadAgentConfig(args, nil, io.Discard)
		if err == nil {
			err = af.check()
		}
		if err != nil {
			return nil, nil, err
		}
		return af, effectiveConfig(fs, false), nil
	}
	af, values, err := load()
	if err != nil {
		t.Fatal(err)
	}
	return &liveConfig{load: load, config: af, values: values}
}

// Reloaders run in order; one that fails is logged and the others still
// run.
func TestReloadRegistry(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	r := newReloadRegistry(zap.New(core))
	var order []string
	r.add("a", func() ([]string, error) { order = append(order, "a"); return []string{"x changed"}, nil }, "key-a")
	r.add("b", func() ([]string, error) { order = append(order, "b"); return nil, errors.New("bad file") })
	r.add("c", func() ([]string, error) { order = append(order, "c"); return nil, nil }, "key-c")
	err := r.run()
	if err == nil || !strings.Contains(err.Error(), "b: bad file") {
		t.Fatalf("run: %v", err)
	}
	if strings.Join(order, "") != "abc" {
		t.Fatalf("order %v", order)
	}
	if logs.FilterMessage("reload failed; the running agent keeps its previous settings for this part").FilterField(zap.String("part", "b")).Len() != 1 {
		t.Errorf("failure not logged: %v", logs.All())
	}
	if logs.FilterMessage("reloaded").FilterField(zap.Strings("changed", []string{"x changed"})).Len() != 1 {
		t.Errorf("change not logged: %v", logs.All())
	}
	if !r.reloadable("key-a") || !r.reloadable("key-c") || r.reloadable("client-addr") {
		t.Error("reloadable keys")
	}
}

// SIGHUP's reload re-reads the config file: a new log level applies, a bad
// file keeps the running configuration, and a changed setting that does
// not reload is reported as needing a restart.
func TestReloadConfigAndLogLevel(t *testing.T) {
	path := writeConfigFile(t, "dev: true\nlog-level: info\nclient-addr: 127.0.0.1:7400\n")
	live := newLiveConfig(t, []string{"--config", path, "--gossip-addr", ""})
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	r := newReloadRegistry(log)
	r.add("config", configReloader(live, r, log))
	r.add("log-level", logLevelReloader(live, level), "log-level")

	if err := r.run(); err != nil || logs.FilterMessage("reloaded").Len() != 0 {
		t.Fatalf("unchanged file: %v %v", err, logs.All())
	}
	if err := os.WriteFile(path, []byte("dev: true\nlog-level: debug\nclient-addr: 127.0.0.1:7500\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.run(); err != nil {
		t.Fatal(err)
	}
	if level.Level() != zapcore.DebugLevel {
		t.Fatalf("log level %v after reload", level.Level())
	}
	restart := logs.FilterMessage("changed settings take effect at the next restart").All()
	if len(restart) != 1 || fmt.Sprint(restart[0].ContextMap()["settings"]) != "[client-addr]" {
		t.Fatalf("restart-needed setting not reported: %v", logs.All())
	}
	if live.current().Node.ClientAddr != "127.0.0.1:7500" {
		t.Fatal("config not current after reload")
	}

	// A broken file: the error is logged, the level and config stay.
	if err := os.WriteFile(path, []byte("dev: true\nlog-level: warn\nlog-levle: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.run(); err == nil || !strings.Contains(err.Error(), "log-levle") {
		t.Fatalf("bad file: %v", err)
	}
	if level.Level() != zapcore.DebugLevel || live.current().LogLevel != "debug" {
		t.Fatalf("a failed reload changed the level to %v", level.Level())
	}
	// A value that fails the agent's checks is not taken either.
	if err := os.WriteFile(path, []byte("log-level: warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.run(); err == nil || !strings.Contains(err.Error(), "secret-file") {
		t.Fatalf("invalid config: %v", err)
	}
	if level.Level() != zapcore.DebugLevel {
		t.Fatal("an invalid config was applied")
	}
}

func testKey(b byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = b
	}
	return k
}

func writeKeyring(t *testing.T, path string, keys ...[]byte) {
	t.Helper()
	var sb strings.Builder
	for _, k := range keys {
		sb.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The keyring file, reloaded: new keys installed, its first key primary,
// keys it no longer lists removed.
func TestReloadKeyring(t *testing.T) {
	a, b, c := testKey(1), testKey(2), testKey(3)
	path := filepath.Join(t.TempDir(), "keyring")
	writeKeyring(t, path, a, b)
	live := newLiveConfig(t, []string{"--dev", "--keyring-file", path})
	kr, err := memberlist.NewKeyring([][]byte{a, b}, a)
	if err != nil {
		t.Fatal(err)
	}
	reload := keyringReloader(live, kr)
	if changed, err := reload(); err != nil || len(changed) != 0 {
		t.Fatalf("unchanged keyring: %v %v", changed, err)
	}
	writeKeyring(t, path, c, a)
	changed, err := reload()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1 gossip key(s) installed", "primary gossip key changed", "1 gossip key(s) removed"}
	if strings.Join(changed, "|") != strings.Join(want, "|") {
		t.Fatalf("changed %q, want %q", changed, want)
	}
	keys := kr.GetKeys()
	if len(keys) != 2 || string(kr.GetPrimaryKey()) != string(c) || string(keys[0]) != string(c) {
		t.Fatalf("keyring after reload: %d keys, primary %x", len(keys), kr.GetPrimaryKey()[:1])
	}
	for _, s := range changed {
		if strings.Contains(s, base64.StdEncoding.EncodeToString(c)) {
			t.Fatal("a key is named in the reload's report")
		}
	}
	// A bad file changes nothing.
	if err := os.WriteFile(path, []byte("not base64!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := reload(); err == nil || len(kr.GetKeys()) != 2 {
		t.Fatalf("bad keyring file: %v, %d keys", err, len(kr.GetKeys()))
	}
	// An agent without encryption cannot start it on SIGHUP.
	if _, err := keyringReloader(live, nil)(); err == nil || !strings.Contains(err.Error(), "next start") {
		t.Fatalf("keyring reload without encryption: %v", err)
	}
}

// The first SIGINT/SIGTERM cancels; SIGHUP with a hook only calls it; a
// second shutdown signal exits with status 1 after the hook logs it.
func TestSignalHandler(t *testing.T) {
	exited := make(chan int, 1)
	h := newSignalHandler(io.Discard, func(code int) { exited <- code })
	hups := make(chan struct{}, 1)
	h.onHangup(func() { hups <- struct{}{} })
	seconds := make(chan os.Signal, 1)
	h.onSecondSignal(func(s os.Signal) { seconds <- s })
	ch := make(chan os.Signal)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.handle(ch, cancel)

	ch <- syscall.SIGHUP
	select {
	case <-hups:
	case <-time.After(10 * time.Second):
		t.Fatal("SIGHUP hook not called")
	}
	if ctx.Err() != nil {
		t.Fatal("SIGHUP ended the command")
	}
	ch <- syscall.SIGTERM
	<-ctx.Done()
	select {
	case code := <-exited:
		t.Fatalf("first SIGTERM exited with %d", code)
	default:
	}
	ch <- syscall.SIGINT
	select {
	case code := <-exited:
		if code != 1 {
			t.Fatalf("second signal: exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second signal did not exit")
	}
	if s := <-seconds; s != syscall.SIGINT {
		t.Fatalf("second-signal hook got %v", s)
	}

	// Without a hangup hook (rollcall connect), SIGHUP shuts down.
	h2 := newSignalHandler(io.Discard, func(int) {})
	ch2 := make(chan os.Signal)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go h2.handle(ch2, cancel2)
	ch2 <- syscall.SIGHUP
	<-ctx2.Done()
	close(ch2)
}
