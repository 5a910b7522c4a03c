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

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/internal/tlsconf"
	"github.com/rollcall/rollcall/metrics"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/webhook"
)

// agentActions are the agent's command-line-only flags.
type agentActions struct {
	printConfig    bool
	validateConfig bool
}

// loadAgentConfig parses the agent's command line, environment and config
// file (see parseFlags) onto the agent's defaults. fs is the parsed flag set.
func loadAgentConfig(args, environ []string, stderr io.Writer) (*agentConfig, *flag.FlagSet, agentActions, error) {
	ac := defaultAgentConfig()
	var act agentActions
	fs, _ := agentFlagSet(&ac, stderr)
	fs.BoolVar(&act.printConfig, "print-config", false, "print the effective configuration (flags, environment, config file, defaults) as YAML, secrets redacted, and exit")
	fs.BoolVar(&act.validateConfig, "validate-config", false, "check the configuration as the agent does before it starts, and exit: status 0 if it would start")
	if err := parseFlags(fs, args, environ); err != nil {
		return nil, nil, act, err
	}
	return &ac, fs, act, nil
}

// check makes every check the agent makes before it listens, without
// binding anything: log settings, the node configuration (token secret,
// limits), the gossip settings (profile, key or keyring file), whether or
// not gossip is on.
func (ac *agentConfig) check() error {
	if err := checkLogFlags(ac.LogLevel, ac.LogFormat); err != nil {
		return err
	}
	if _, err := ac.nodeConfig(zap.NewNop()); err != nil {
		return err
	}
	if _, err := ac.tlsServer(); err != nil {
		return err
	}
	return ac.checkGossip()
}

// checkGossip validates the gossip settings; startCluster uses them as
// they are.
func (ac *agentConfig) checkGossip() error {
	if ac.Gossip.LeaseTimeout <= 0 {
		return fmt.Errorf("--peer-lease %v: must be positive", ac.Gossip.LeaseTimeout)
	}
	gc := ac.Gossip
	gc.Name = "check"
	gc.AliveInterval = 0 // as gossipConfig: from --peer-lease
	if err := gc.Validate(); err != nil {
		return fmt.Errorf("--gossip-profile: %w", err)
	}
	switch {
	case gc.BatchDelay < 0:
		return fmt.Errorf("--gossip-batch %v: must not be negative (0: no window)", gc.BatchDelay)
	case ac.GossipKey != "" && ac.KeyringFile != "":
		return errors.New("give --gossip-key or --keyring-file, not both")
	case ac.GossipKey != "":
		if _, err := gossip.ParseKey(ac.GossipKey); err != nil {
			return fmt.Errorf("--gossip-key: %w", err)
		}
	case ac.KeyringFile != "":
		if _, err := gossip.LoadKeyring(ac.KeyringFile); err != nil {
			return fmt.Errorf("--keyring-file: %w", err)
		}
	}
	return ac.checkGossipKeyed()
}

// checkGossipKeyed refuses plaintext gossip on a network: outside --dev, a
// gossip address that is not loopback needs a key, or --gossip-insecure.
func (ac *agentConfig) checkGossipKeyed() error {
	keyed := ac.GossipKey != "" || ac.GossipKeyFile != "" || ac.KeyringFile != ""
	if keyed || ac.GossipInsecure || ac.Node.Dev {
		return nil
	}
	if w := ac.Gossip.WANBindAddr; w != "" && !loopbackAddr(w) {
		return fmt.Errorf("--wan-addr %s is not a loopback address and gossip has no key: anyone who reaches that port "+
			"could join the WAN pool and forge regions and presence. Give a gossip key (--gossip-key-file, --keyring-file, "+
			"--gossip-key or ROLLCALL_GOSSIP_KEY), or --gossip-insecure on a network nobody else reaches", w)
	}
	if ac.Gossip.BindAddr == "" || loopbackAddr(ac.Gossip.BindAddr) {
		return nil
	}
	return fmt.Errorf("--gossip-addr %s is not a loopback address and gossip has no key: anyone who reaches that port "+
		"could join the cluster and forge members and presence. Give a gossip key (--gossip-key-file, --keyring-file, "+
		"--gossip-key or ROLLCALL_GOSSIP_KEY; 'rollcall keys generate' makes one), or --gossip-insecure to run gossip in plain text "+
		"on a network nobody else reaches", ac.Gossip.BindAddr)
}

// loopbackAddr reports whether addr is host:port with a loopback IP.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// runAgent runs a gateway node until ctx ends (SIGINT/SIGTERM), then drains
// it: clients are told shutting_down, sessions are written disconnected and
// published, and the cluster layer leaves. SIGHUP reloads what can be
// reloaded (see reload.go).
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ac, fs, act, err := loadAgentConfig(args, os.Environ(), stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if act.printConfig {
		return writeConfig(stdout, "# rollcall agent: effective configuration (flags > environment > config file > defaults); secrets redacted\n", effectiveConfig(fs, true))
	}
	if err := ac.check(); err != nil {
		return err
	}
	if act.validateConfig {
		_, err := fmt.Fprintln(stdout, "configuration is valid")
		return err
	}
	log, level, err := newLogger(ac.LogLevel, ac.LogFormat, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about it at exit

	// SIGHUP reloads; register a reloadable part with reloads.add.
	reloads, live, unhook := agentReloads(ctx, args, ac, fs, log, level)
	defer unhook()

	cfg, err := ac.nodeConfig(log)
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
	tlsServer, err := ac.tlsServer()
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
	// The incarnation is settled, and kept in --data-dir, before the node
	// exists: it writes as this incarnation from its first record.
	if cfg.Incarnation, err = ac.chooseIncarnation(cfg.Name, cfg.Clock.Now(), log); err != nil {
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
	cl, leave, err := startCluster(ctx, ac, n, log, api)
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

// nodeConfig returns the node configuration the agent runs with: Node,
// checked as the flags promise, with the token verifier, the admin token
// and the logger added, validated.
func (ac *agentConfig) nodeConfig(log *zap.Logger) (node.Config, error) {
	cfg := ac.Node
	cfg.Logger = log
	src, opts := ac.TokenSource, ac.TokenOptions
	switch {
	case src.SecretKeyID != "" && src.SecretFile == "":
		return cfg, errors.New("--secret-kid needs --secret-file")
	case src.SecretFile != "" || len(src.KeyFiles) > 0:
		v, err := auth.NewVerifier(src, opts)
		if err != nil {
			return cfg, err
		}
		cfg.TokenVerifier = v
		var keys []string
		for _, k := range v.Keys().Keys() {
			keys = append(keys, k.String())
		}
		log.Info("client token keys loaded", zap.Strings("keys", keys),
			zap.String("audience", opts.Audience), zap.String("issuer", opts.Issuer), zap.Duration("leeway", v.Leeway()))
		if cfg.Dev {
			log.Warn("--dev given with token keys: tokens are NOT checked")
		}
	case !cfg.Dev:
		return cfg, errors.New("need --secret-file (HS256 key) or --token-keys (PEM/JWKS public keys) for client tokens, or --dev (no authentication)")
	}
	if ac.AdminTokenFile != "" {
		token, err := node.ReadAdminTokenFile(ac.AdminTokenFile)
		if err != nil {
			return cfg, fmt.Errorf("--admin-token-file: %w", err)
		}
		cfg.AdminToken = token
	}
	if ac.WebhookSecretFile != "" {
		keys, err := webhook.ReadSecretFile(ac.WebhookSecretFile)
		if err != nil {
			return cfg, fmt.Errorf("--webhook-secret-file: %w", err)
		}
		cfg.Webhook.Secrets = keys
	}
	if len(cfg.Webhook.URLs) > 0 {
		log.Info("webhooks on", zap.Int("urls", len(cfg.Webhook.URLs)), zap.Stringer("events", cfg.Webhook.Events),
			zap.Int("secrets", len(cfg.Webhook.Secrets)))
	}
	if err := checkLimitFlags(cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// tlsServer loads --tls-cert, --tls-key and --tls-client-ca; nil without
// --tls-cert (plain TCP).
func (ac *agentConfig) tlsServer() (*tlsconf.Server, error) {
	files := ac.TLS
	if files.CertFile == "" {
		if files.KeyFile != "" || files.ClientCAFile != "" {
			return nil, errors.New("--tls-key and --tls-client-ca need --tls-cert")
		}
		return nil, nil
	}
	if files.KeyFile == "" {
		return nil, errors.New("--tls-cert needs --tls-key")
	}
	return tlsconf.NewServer(files)
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
