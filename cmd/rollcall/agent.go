package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/node"
)

// agentFlags are the flags of `rollcall agent`.
type agentFlags struct {
	name         string
	clientAddr   string
	httpAddr     string
	heartbeat    time.Duration
	timeout      time.Duration
	drainTimeout time.Duration
	maxConns     int
	sendRate     float64
	sendBurst    int
	secretFile   string
	dev          bool
	logLevel     string
	logFormat    string
	cluster      clusterFlags

	// Rolling restarts and the address clients are told.
	drainGrace      time.Duration // --drain-grace: node.Config.DrainGrace
	clientAdvertise string        // --client-advertise: node.Config.ClientAdvertise and gossip.Config.ClientAddr
}

// clusterFlags are the gossip flags of `rollcall agent`, parsed here and
// handed to startCluster (issue 4 wires them to gossip/).
type clusterFlags struct {
	GossipAddr      string        // --gossip-addr: memberlist bind address
	Join            []string      // --join: gossip addresses of existing members
	GossipProfile   string        // --gossip-profile: lan, wan or local timings
	GossipKey       string        // --gossip-key: base64 gossip encryption key
	KeyringFile     string        // --keyring-file: file of base64 keys, primary first
	GossipAdvertise string        // --gossip-advertise: address peers should use
	PurgeHorizon    time.Duration // --purge-horizon: drop a dead gateway's sessions after this (also node.Config.PurgeHorizon)
}

func agentFlagSet(af *agentFlags, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	fs.StringVar(&af.name, "name", host, "node name, unique in the cluster")
	fs.StringVar(&af.clientAddr, "client-addr", node.DefaultClientAddr, "TCP address for clients")
	fs.StringVar(&af.httpAddr, "http-addr", "127.0.0.1:7401", "HTTP address for /healthz and /v1/...; empty disables")
	fs.DurationVar(&af.heartbeat, "heartbeat", node.DefaultHeartbeat, "heartbeat interval told to clients")
	fs.DurationVar(&af.timeout, "timeout", node.DefaultTimeout, "silence after which a session expires")
	fs.DurationVar(&af.drainTimeout, "drain-timeout", node.DefaultDrainTimeout, "graceful shutdown bound on SIGTERM/SIGINT")
	fs.IntVar(&af.maxConns, "max-connections", node.DefaultMaxConnections, "client connections held at once; more are told overloaded and closed (negative: no cap)")
	fs.Float64Var(&af.sendRate, "send-rate", node.DefaultSendRate, "sends per second one session may make on average; more are refused rate_limited (negative: no limit)")
	fs.IntVar(&af.sendBurst, "send-burst", node.DefaultSendBurst, "sends one session may make at once after a quiet spell")
	fs.StringVar(&af.secretFile, "secret-file", "", "file holding the HS256 key of client tokens (see 'rollcall token')")
	fs.BoolVar(&af.dev, "dev", false, "accept any user without a token (development only; logs a loud warning)")
	fs.StringVar(&af.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&af.logFormat, "log-format", "console", "console or json")
	fs.DurationVar(&af.drainGrace, "drain-grace", node.DefaultDrainGrace, "on SIGTERM/SIGINT, how long sessions stay online while their clients reconnect to another gateway; below --drain-timeout (negative: end them at once)")
	fs.StringVar(&af.clientAdvertise, "client-advertise", "", "client address told to clients and other gateways (default: --client-addr, or with an unspecified host the gossip advertise IP and the client port)")
	cf := &af.cluster
	fs.StringVar(&cf.GossipAddr, "gossip-addr", "127.0.0.1:7946", "gossip (memberlist) bind address, UDP and TCP; empty runs standalone")
	join := fs.String("join", "", "comma-separated gossip addresses of cluster members to join")
	fs.StringVar(&cf.GossipProfile, "gossip-profile", "lan", "gossip timings: lan, wan or local")
	fs.StringVar(&cf.GossipKey, "gossip-key", "", "base64 key (16, 24 or 32 bytes) encrypting gossip")
	fs.StringVar(&cf.KeyringFile, "keyring-file", "", "file of base64 gossip keys, one per line, primary first")
	fs.StringVar(&cf.GossipAdvertise, "gossip-advertise", "", "gossip address to advertise to peers (default: the bind address)")
	fs.DurationVar(&cf.PurgeHorizon, "purge-horizon", 30*time.Minute, "how long a dead gateway's sessions stay (shown expired) before they are purged")
	return fs, join
}

// runAgent runs a gateway node until ctx ends (SIGINT/SIGTERM), then drains
// it: clients are told shutting_down, sessions are written disconnected and
// published, and the cluster layer leaves.
func runAgent(ctx context.Context, args []string, _, stderr io.Writer) error {
	var af agentFlags
	fs, join := agentFlagSet(&af, stderr)
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	af.cluster.Join = splitList(*join)
	log, err := newLogger(af.logLevel, af.logFormat)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about it at exit

	cfg, err := af.nodeConfig(log)
	if err != nil {
		return err
	}
	// POST /v1/leave (rollcall leave) ends the run like SIGTERM does.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	api := &clusterAPI{leave: stop}
	cfg.HTTPHandlers = api.handlers()
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	cl, leave, err := startCluster(ctx, af.cluster, n, log, api)
	if err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	if cl != nil {
		n.SetCluster(cl)
	} else {
		log.Info("running standalone (no cluster)")
	}
	if err := n.Start(); err != nil {
		if leave != nil {
			leave(context.Background()) //nolint:errcheck // already failing
		}
		return err
	}
	<-ctx.Done()
	log.Info("shutting down", zap.Duration("drain_timeout", cfg.DrainTimeout))
	dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	var errs []error
	if err := n.Drain(dctx); err != nil {
		errs = append(errs, err)
	}
	if leave != nil {
		if err := leave(dctx); err != nil {
			errs = append(errs, fmt.Errorf("leave cluster: %w", err))
		}
	}
	n.Close()
	log.Info("stopped")
	return errors.Join(errs...)
}

// nodeConfig turns the flags into a node configuration.
func (af *agentFlags) nodeConfig(log *zap.Logger) (node.Config, error) {
	cfg := node.DefaultConfig()
	cfg.Name = af.name
	cfg.ClientAddr = af.clientAddr
	cfg.HTTPAddr = af.httpAddr
	cfg.Heartbeat = af.heartbeat
	cfg.Timeout = af.timeout
	cfg.DrainTimeout = af.drainTimeout
	cfg.DrainGrace = af.drainGrace
	cfg.ClientAdvertise = af.clientAdvertise
	cfg.MaxConnections = af.maxConns
	cfg.SendRate = af.sendRate
	cfg.SendBurst = af.sendBurst
	cfg.PurgeHorizon = af.cluster.PurgeHorizon
	cfg.Dev = af.dev
	cfg.Logger = log
	switch {
	case af.secretFile != "":
		secret, err := node.ReadSecretFile(af.secretFile)
		if err != nil {
			return cfg, err
		}
		cfg.Secret = secret
		if af.dev {
			log.Warn("--dev given with --secret-file: tokens are NOT checked")
		}
	case !af.dev:
		return cfg, errors.New("need --secret-file (HS256 key for client tokens) or --dev (no authentication)")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
