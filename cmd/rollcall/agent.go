package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/internal/tlsconf"
	"github.com/rollcall/rollcall/metrics"
	"github.com/rollcall/rollcall/node"
)

// agentFlags are the flags of `rollcall agent`.
type agentFlags struct {
	name         string
	clientAddr   string
	httpAddr     string
	wsOrigins    string // --ws-allowed-origins: node.Config.WSAllowedOrigins, comma-separated
	wsAddr       string // --ws-addr: node.Config.WSAddr
	heartbeat    time.Duration
	timeout      time.Duration
	drainTimeout time.Duration
	maxConns     int
	sendRate     float64
	sendBurst    int
	secretFile   string
	dev          bool
	tokens       tokenFlags
	logLevel     string
	logFormat    string
	cluster      clusterFlags

	// TLS and the admin API (docs/operations/security.md).
	tlsCert        string // --tls-cert: PEM certificate chain of both ports
	tlsKey         string // --tls-key: its private key
	tlsClientCA    string // --tls-client-ca: CA client certificates must chain to (mutual TLS)
	adminTokenFile string // --admin-token-file: bearer token of the admin API

	// Abuse limits and buffer sizes (limits.go).
	limits limitFlags

	// Rolling restarts and the address clients are told.
	drainGrace      time.Duration // --drain-grace: node.Config.DrainGrace
	clientAdvertise string        // --client-advertise: node.Config.ClientAdvertise and gossip.Config.ClientAddr
}

// tokenFlags are the client-token flags of `rollcall agent` besides
// --secret-file: they build the auth.Verifier the node checks tokens with.
type tokenFlags struct {
	SecretKID string        // --secret-kid: the kid of --secret-file's key (default none)
	KeyFiles  string        // --token-keys: comma-separated PEM or JWKS files of verification keys
	Audience  string        // --token-audience: required aud (default: not checked)
	Issuer    string        // --token-issuer: required iss (default: not checked)
	Leeway    time.Duration // --token-leeway: clock skew allowed on exp, nbf, iat
}

// clusterFlags are the gossip flags of `rollcall agent`, parsed here and
// handed to startCluster, which wires them to gossip/.
type clusterFlags struct {
	GossipAddr      string        // --gossip-addr: memberlist bind address
	Join            []string      // --join: gossip addresses of existing members
	GossipProfile   string        // --gossip-profile: lan, wan or local timings
	GossipKey       string        // --gossip-key: base64 gossip encryption key
	GossipKeyFile   string        // --gossip-key-file: file holding the base64 gossip key
	KeyringFile     string        // --keyring-file: file of base64 keys, primary first
	GossipAdvertise string        // --gossip-advertise: address peers should use
	GossipBatch     time.Duration // --gossip-batch: gossip.Config.BatchDelay (0: no window)
	GossipRelay     dissem.Relay  // --gossip-relay: gossip.Config.Relay
	GossipCompress  bool          // --gossip-compress: gossip.Config.Compress
	PurgeHorizon    time.Duration // --purge-horizon: drop a dead gateway's sessions after this (also node.Config.PurgeHorizon)
}

func agentFlagSet(af *agentFlags, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	fs.StringVar(&af.name, "name", host, "node name, unique in the cluster")
	fs.StringVar(&af.clientAddr, "client-addr", node.DefaultClientAddr, "TCP address for clients")
	fs.StringVar(&af.httpAddr, "http-addr", "127.0.0.1:7401", "HTTP address for /healthz and /v1/...; empty disables")
	fs.StringVar(&af.wsOrigins, "ws-allowed-origins", "", "comma-separated origin host patterns (app.example.com, *.example.com) whose pages may open WebSockets on --http-addr's /ws; * allows any; default: the same origin only (any with --dev)")
	fs.StringVar(&af.wsAddr, "ws-addr", "", "address of a listener of its own serving only the WebSocket client endpoint /ws (default: none; /ws is on --http-addr either way)")
	fs.DurationVar(&af.heartbeat, "heartbeat", node.DefaultHeartbeat, "heartbeat interval told to clients")
	fs.DurationVar(&af.timeout, "timeout", node.DefaultTimeout, "silence after which a session expires")
	fs.DurationVar(&af.drainTimeout, "drain-timeout", node.DefaultDrainTimeout, "graceful shutdown bound on SIGTERM/SIGINT")
	fs.IntVar(&af.maxConns, "max-connections", node.DefaultMaxConnections, "client connections held at once; more are told overloaded and closed (negative: no cap)")
	fs.Float64Var(&af.sendRate, "send-rate", node.DefaultSendRate, "sends per second one session may make on average; more are refused rate_limited (negative: no limit)")
	fs.IntVar(&af.sendBurst, "send-burst", node.DefaultSendBurst, "sends one session may make at once after a quiet spell")
	fs.StringVar(&af.secretFile, "secret-file", "", "file holding the HS256 key of client tokens (see 'rollcall token')")
	tf := &af.tokens
	fs.StringVar(&tf.SecretKID, "secret-kid", "", "key id (kid) of the --secret-file key; tokens naming it use it (default: none)")
	fs.StringVar(&tf.KeyFiles, "token-keys", "", "comma-separated PEM or JWKS files of token keys (RS256, ES256, EdDSA public keys; HS256 in JWKS); reread on reload")
	fs.StringVar(&tf.Audience, "token-audience", "", "aud every client token must carry (default: aud not checked)")
	fs.StringVar(&tf.Issuer, "token-issuer", "", "iss every client token must carry (default: iss not checked)")
	fs.DurationVar(&tf.Leeway, "token-leeway", auth.DefaultLeeway, "clock skew allowed when checking a token's exp, nbf and iat (0: none)")
	fs.BoolVar(&af.dev, "dev", false, "accept any user without a token (development only; logs a loud warning)")
	fs.StringVar(&af.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&af.logFormat, "log-format", "console", "console or json")
	af.limits.register(fs)
	fs.DurationVar(&af.drainGrace, "drain-grace", node.DefaultDrainGrace, "on SIGTERM/SIGINT, how long sessions stay online while their clients reconnect to another gateway; below --drain-timeout (negative: end them at once)")
	fs.StringVar(&af.clientAdvertise, "client-advertise", "", "client address told to clients and other gateways (default: --client-addr, or with an unspecified host the gossip advertise IP and the client port)")
	cf := &af.cluster
	fs.StringVar(&cf.GossipAddr, "gossip-addr", "127.0.0.1:7946", "gossip (memberlist) bind address, UDP and TCP; empty runs standalone")
	join := fs.String("join", "", "comma-separated gossip addresses of cluster members to join")
	fs.StringVar(&cf.GossipProfile, "gossip-profile", "lan", "gossip timings: lan, wan or local")
	fs.StringVar(&cf.GossipKey, "gossip-key", "", "base64 key (16, 24 or 32 bytes) encrypting gossip; visible in ps: prefer --gossip-key-file or ROLLCALL_GOSSIP_KEY")
	fs.StringVar(&cf.GossipKeyFile, "gossip-key-file", "", "file holding the base64 gossip key (the form not visible in ps)")
	fs.StringVar(&cf.KeyringFile, "keyring-file", "", "file of base64 gossip keys, one per line, primary first")
	fs.StringVar(&cf.GossipAdvertise, "gossip-advertise", "", "gossip address to advertise to peers (default: the bind address)")
	fs.Var(&cf.GossipRelay, "gossip-relay", "how changes travel in a cluster above 64 gateways: tree (a relay tree over the gateways: about one copy per gateway, two hops) or epidemic (memberlist's piggyback gossip)")
	fs.DurationVar(&cf.GossipBatch, "gossip-batch", gossip.DefaultConfig().BatchDelay, "write window of the gossip: a change with no flush in the last window goes to the other gateways at once, changes within a window of a flush wait for its end and go together (0: no window)")
	fs.BoolVar(&cf.GossipCompress, "gossip-compress", false, "LZW-compress gossip messages (memberlist's compression): smaller full-state transfers to joining members, at a third more CPU per status change; deltas are too small to shrink")
	fs.DurationVar(&cf.PurgeHorizon, "purge-horizon", 30*time.Minute, "how long a dead gateway's sessions stay (shown expired) before they are purged")
	fs.StringVar(&af.tlsCert, "tls-cert", "", "PEM certificate (chain, leaf first) serving TLS on the client and HTTP ports; reloaded with the key on SIGHUP; empty: plain TCP")
	fs.StringVar(&af.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&af.tlsClientCA, "tls-client-ca", "", "PEM CA certificate(s): clients of both ports must present a certificate signed by one (mutual TLS)")
	fs.StringVar(&af.adminTokenFile, "admin-token-file", "", "file holding the admin API's bearer token (its text minus trailing whitespace, at least 32 bytes); without it the admin API answers 403")
	return fs, join
}

// agentActions are the agent's command-line-only flags.
type agentActions struct {
	printConfig    bool
	validateConfig bool
}

// loadAgentFlags parses the agent's command line, environment and config
// file (see parseFlags). fs is the parsed flag set.
func loadAgentFlags(args, environ []string, stderr io.Writer) (*agentFlags, *flag.FlagSet, agentActions, error) {
	af := &agentFlags{}
	var act agentActions
	fs, join := agentFlagSet(af, stderr)
	fs.BoolVar(&act.printConfig, "print-config", false, "print the effective configuration (flags, environment, config file, defaults) as YAML, secrets redacted, and exit")
	fs.BoolVar(&act.validateConfig, "validate-config", false, "check the configuration as the agent does before it starts, and exit: status 0 if it would start")
	if err := parseFlags(fs, args, environ); err != nil {
		return nil, nil, act, err
	}
	af.cluster.Join = splitList(*join)
	return af, fs, act, nil
}

// check makes every check the agent makes before it listens, without
// binding anything: log settings, the node configuration (token secret,
// limits), the gossip settings (profile, key or keyring file), whether or
// not gossip is on.
func (af *agentFlags) check() error {
	if err := checkLogFlags(af.logLevel, af.logFormat); err != nil {
		return err
	}
	if _, err := af.nodeConfig(zap.NewNop()); err != nil {
		return err
	}
	if _, err := af.tlsServer(); err != nil {
		return err
	}
	return af.cluster.check()
}

// check validates the gossip flags; startCluster uses them as they are.
func (cf clusterFlags) check() error {
	gc := gossip.DefaultConfig()
	gc.Name, gc.Profile = "check", cf.GossipProfile
	if err := gc.Validate(); err != nil {
		return fmt.Errorf("--gossip-profile: %w", err)
	}
	switch {
	case cf.GossipBatch < 0:
		return fmt.Errorf("--gossip-batch %v: must not be negative (0: no window)", cf.GossipBatch)
	case cf.GossipKey != "" && cf.KeyringFile != "":
		return errors.New("give --gossip-key or --keyring-file, not both")
	case cf.GossipKey != "":
		if _, err := gossip.ParseKey(cf.GossipKey); err != nil {
			return fmt.Errorf("--gossip-key: %w", err)
		}
	case cf.KeyringFile != "":
		if _, err := gossip.LoadKeyring(cf.KeyringFile); err != nil {
			return fmt.Errorf("--keyring-file: %w", err)
		}
	}
	return nil
}

// runAgent runs a gateway node until ctx ends (SIGINT/SIGTERM), then drains
// it: clients are told shutting_down, sessions are written disconnected and
// published, and the cluster layer leaves. SIGHUP reloads what can be
// reloaded (see reload.go).
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	af, fs, act, err := loadAgentFlags(args, os.Environ(), stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if act.printConfig {
		return writeConfig(stdout, "# rollcall agent: effective configuration (flags > environment > config file > defaults); secrets redacted\n", effectiveConfig(fs, true))
	}
	if err := af.check(); err != nil {
		return err
	}
	if act.validateConfig {
		_, err := fmt.Fprintln(stdout, "configuration is valid")
		return err
	}
	log, level, err := newLogger(af.logLevel, af.logFormat, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about it at exit

	// SIGHUP reloads; register a reloadable part with reloads.add.
	reloads, live, unhook := agentReloads(ctx, args, af, fs, log, level)
	defer unhook()

	cfg, err := af.nodeConfig(log)
	if err != nil {
		return err
	}
	// Every client connection holds a file descriptor: the node keeps
	// --max-connections below the open-file limit (fdlimit.go).
	cfg.FileLimit = openFileLimit(log)
	cfg.Pollers = schedulerSlots(log)
	// POST /v1/leave (rollcall leave) ends the run like SIGTERM does.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	api := &clusterAPI{leave: stop}
	cfg.ReadHTTPHandlers = api.readHandlers()
	cfg.AdminHTTPHandlers = api.adminHandlers()
	// TLS on both ports; SIGHUP re-reads the certificate files.
	tlsServer, err := af.tlsServer()
	if err != nil {
		return err
	}
	if tlsServer != nil {
		cfg.TLS = tlsServer.Config()
		log.Info("TLS on the client and HTTP ports", zap.Stringer("certificate", tlsServer.Info()))
	} else if !isLoopback(cfg.ClientAddr) {
		log.Warn("the client port is plain TCP on a non-loopback address: tokens cross the network in clear text; give --tls-cert and --tls-key")
	}
	// GET /metrics: Prometheus metrics, open like /healthz (they hold no
	// secrets and no user names). memberlist reports through go-metrics'
	// process-wide sink, installed before the cluster starts.
	reg := prometheus.NewRegistry()
	cfg.HTTPHandlers = map[string]http.Handler{"GET /metrics": metrics.Handler(reg)}
	if _, err := metrics.InstallMemberlistSink(reg); err != nil {
		return err
	}
	if err := metrics.RegisterProcess(reg); err != nil {
		return err
	}
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	logConnectionCap(log, n, n.Limits().MaxConnections)
	if err := reg.Register(metrics.NewNodeCollector(n)); err != nil {
		return fmt.Errorf("register node metrics: %w", err)
	}
	cl, leave, err := startCluster(ctx, af.cluster, n, log, api)
	if err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	if gc := api.cluster.Load(); gc != nil {
		if err := reg.Register(metrics.NewClusterCollector(gc)); err != nil {
			leave(context.Background()) //nolint:errcheck // already failing
			return fmt.Errorf("register cluster metrics: %w", err)
		}
	}
	if cl != nil {
		n.SetCluster(cl)
	} else {
		log.Info("running standalone (no cluster)")
	}
	reloads.add("keyring", keyringReloader(live, api.keyring.Load()), "keyring-file")
	if tlsServer != nil {
		reloads.add("tls", tlsReloader(tlsServer))
	}
	reloads.add("limits", limitsReloader(live, n), limitKeys()...)
	reloads.add("token-keys", n.ReloadTokenKeys)
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

// runValidateConfig is `rollcall validate-config --config FILE`: the
// agent's --validate-config, the file also accepted as the one argument.
func runValidateConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && !strings.HasPrefix(args[0], "-") {
		args = []string{"--" + configFlag, args[0]}
	}
	if _, env := os.LookupEnv(envName(configFlag)); len(args) == 0 && !env {
		return errors.New("name the file: rollcall validate-config FILE (or --config FILE, or ROLLCALL_CONFIG)")
	}
	return runAgent(ctx, append(args, "--validate-config"), stdout, stderr)
}

// nodeConfig turns the flags into a node configuration.
func (af *agentFlags) nodeConfig(log *zap.Logger) (node.Config, error) {
	cfg := node.DefaultConfig()
	cfg.Name = af.name
	cfg.ClientAddr = af.clientAddr
	cfg.HTTPAddr = af.httpAddr
	cfg.WSAllowedOrigins = splitList(af.wsOrigins)
	cfg.WSAddr = af.wsAddr
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
	src := auth.Source{SecretFile: af.secretFile, SecretKeyID: af.tokens.SecretKID, KeyFiles: splitList(af.tokens.KeyFiles)}
	switch {
	case src.SecretKeyID != "" && src.SecretFile == "":
		return cfg, errors.New("--secret-kid needs --secret-file")
	case src.SecretFile != "" || len(src.KeyFiles) > 0:
		leeway := af.tokens.Leeway
		if leeway == 0 {
			leeway = -1 // auth.Options: negative allows no skew, zero takes the default
		}
		v, err := auth.NewVerifier(src, auth.Options{Audience: af.tokens.Audience, Issuer: af.tokens.Issuer, Leeway: leeway})
		if err != nil {
			return cfg, err
		}
		cfg.TokenVerifier = v
		var keys []string
		for _, k := range v.Keys().Keys() {
			keys = append(keys, k.String())
		}
		log.Info("client token keys loaded", zap.Strings("keys", keys),
			zap.String("audience", af.tokens.Audience), zap.String("issuer", af.tokens.Issuer), zap.Duration("leeway", v.Leeway()))
		if af.dev {
			log.Warn("--dev given with token keys: tokens are NOT checked")
		}
	case !af.dev:
		return cfg, errors.New("need --secret-file (HS256 key) or --token-keys (PEM/JWKS public keys) for client tokens, or --dev (no authentication)")
	}
	if af.adminTokenFile != "" {
		token, err := node.ReadAdminTokenFile(af.adminTokenFile)
		if err != nil {
			return cfg, fmt.Errorf("--admin-token-file: %w", err)
		}
		cfg.AdminToken = token
	}
	if err := af.limits.apply(&cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// tlsServer loads --tls-cert, --tls-key and --tls-client-ca; nil without
// --tls-cert (plain TCP).
func (af *agentFlags) tlsServer() (*tlsconf.Server, error) {
	if af.tlsCert == "" {
		if af.tlsKey != "" || af.tlsClientCA != "" {
			return nil, errors.New("--tls-key and --tls-client-ca need --tls-cert")
		}
		return nil, nil
	}
	if af.tlsKey == "" {
		return nil, errors.New("--tls-cert needs --tls-key")
	}
	return tlsconf.NewServer(tlsconf.ServerFiles{CertFile: af.tlsCert, KeyFile: af.tlsKey, ClientCAFile: af.tlsClientCA})
}

// isLoopback reports whether a listen address is on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
