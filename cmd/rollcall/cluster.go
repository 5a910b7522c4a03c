package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/node"
)

// The agent joins a *node.Node to a *gossip.Cluster, and neither package
// imports the other: node declares what it needs of a cluster (node.Cluster
// and the optional interfaces it looks for), gossip what it needs of the
// node (gossip.Host), and the values both pass live in package cluster.
// These checks keep the two sides in step: a method that drifted from an
// optional interface would otherwise switch its feature off silently.
var (
	_ gossip.Host            = (*node.Node)(nil)
	_ node.Cluster           = (*gossip.Cluster)(nil)
	_ node.AddressBook       = (*gossip.Cluster)(nil)
	_ node.GatewayLister     = (*gossip.Cluster)(nil)
	_ node.LiveGatewayLister = (*gossip.Cluster)(nil)
	_ node.DrainAnnouncer    = (*gossip.Cluster)(nil)
	_ node.ReadinessReporter = (*gossip.Cluster)(nil)
	_ node.Membership        = (*gossip.Cluster)(nil)
)

// startCluster joins the node to its cluster with gossip/ (memberlist). It
// returns the cluster to attach and the leave function runAgent calls after
// node.Drain has written and published every local session as
// disconnected: it flushes those deltas reliably to every member and leaves
// memberlist within the context's deadline.
//
// An empty --gossip-addr runs the agent standalone.
func startCluster(_ context.Context, ac *agentConfig, n *node.Node, log *zap.Logger, api *clusterAPI) (node.Cluster, func(context.Context) error, error) {
	if ac.Gossip.BindAddr == "" {
		return nil, nil, nil
	}
	cfg, err := ac.gossipConfig(n.Name(), log)
	if err != nil {
		return nil, nil, err
	}
	cfg.Incarnation = n.Origin().Incarnation
	if a := n.Config().ClientAddr; a != "" {
		cfg.ClientAddr = a
	}
	if a := n.Config().ClientAdvertise; a != "" {
		cfg.ClientAddr = a // --client-advertise
	}
	if cfg.Keyring == nil {
		log.Warn("gossip is NOT encrypted: give --gossip-key or --keyring-file on untrusted networks")
	}
	c, err := gossip.New(cfg, n)
	if err != nil {
		return nil, nil, err
	}
	api.cluster.Store(c)
	api.keyring.Store(cfg.Keyring)
	log.Info("gossip started", zap.String("gossip_addr", c.LocalAddr()), zap.Strings("join", cfg.Join),
		zap.String("profile", cfg.Profile), zap.Bool("encrypted", cfg.Keyring != nil), zap.String("region", cfg.Region),
		zap.String("wan_addr", c.WANAddr()), zap.Strings("wan_join", cfg.WANJoin))
	leave := func(ctx context.Context) error {
		timeout := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = max(time.Until(dl), 100*time.Millisecond)
		}
		return c.Leave(timeout)
	}
	return c, leave, nil
}

// gossipConfig returns the gossip configuration of the node named name:
// the --gossip-* flags, the keyring from --gossip-key, --gossip-key-file or
// --keyring-file (nil: plaintext) and the logger. startCluster adds what
// comes from the node.
func (ac *agentConfig) gossipConfig(name string, log *zap.Logger) (gossip.Config, error) {
	cfg := ac.Gossip
	cfg.Name = name
	cfg.Logger = log
	cfg.AliveInterval = 0 // from --peer-lease: dissem.AliveIntervalFor (gossip.Config.Validate)
	gossipKey := ac.GossipKey
	if ac.GossipKeyFile != "" {
		if gossipKey != "" {
			return cfg, errors.New("give --gossip-key or --gossip-key-file, not both")
		}
		b, err := os.ReadFile(ac.GossipKeyFile)
		if err != nil {
			return cfg, fmt.Errorf("--gossip-key-file: %w", err)
		}
		gossipKey = strings.TrimSpace(string(b))
		if gossipKey == "" {
			return cfg, fmt.Errorf("--gossip-key-file %s is empty", ac.GossipKeyFile)
		}
	}
	switch {
	case gossipKey != "" && ac.KeyringFile != "":
		return cfg, errors.New("give one of --gossip-key, --gossip-key-file and --keyring-file")
	case gossipKey != "":
		key, err := gossip.ParseKey(gossipKey)
		if err != nil {
			return cfg, fmt.Errorf("--gossip-key: %w", err)
		}
		if cfg.Keyring, err = memberlistKeyring(key); err != nil {
			return cfg, err
		}
	case ac.KeyringFile != "":
		kr, err := gossip.LoadKeyring(ac.KeyringFile)
		if err != nil {
			return cfg, fmt.Errorf("--keyring-file: %w", err)
		}
		cfg.Keyring = kr
	}
	return cfg, nil
}

// clusterAPI serves the cluster's HTTP routes on the node's HTTP endpoint:
//
//	GET  /v1/members   read: the members, as `rollcall members` shows them
//	GET  /v1/keys      admin: the installed gossip keys by id (gossip.KeyID),
//	                   primary first; never the keys
//	POST /v1/keys      admin: {"op":"install|use|remove","key":"<base64>"}: a
//	                   keyring step on every member; answers with key ids
//	POST /v1/leave     admin: graceful leave: drain, publish, leave, exit
type clusterAPI struct {
	cluster atomic.Pointer[gossip.Cluster]
	leave   func() // cancels the agent's run context

	// keyring is the cluster's, for SIGHUP's keyring reload (nil: gossip
	// is not encrypted).
	keyring atomic.Pointer[memberlist.Keyring]
}

// readHandlers are the read-only routes (node.Config.ReadHTTPHandlers).
func (a *clusterAPI) readHandlers() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /v1/members": http.HandlerFunc(a.members),
	}
}

// adminHandlers are the routes that change state or reveal secrets
// (node.Config.AdminHTTPHandlers).
func (a *clusterAPI) adminHandlers() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /v1/keys":   http.HandlerFunc(a.keys),
		"POST /v1/keys":  http.HandlerFunc(a.keyOp),
		"POST /v1/leave": http.HandlerFunc(a.leaveNow),
	}
}

// keysReply is the answer of GET and POST /v1/keys.
type keysReply struct {
	OK   bool             `json:"ok,omitempty"`
	Keys []gossip.KeyInfo `json:"keys"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *clusterAPI) standalone(w http.ResponseWriter) *gossip.Cluster {
	c := a.cluster.Load()
	if c == nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": "this agent runs standalone (no cluster)"})
	}
	return c
}

func (a *clusterAPI) members(w http.ResponseWriter, _ *http.Request) {
	if c := a.standalone(w); c != nil {
		writeJSON(w, http.StatusOK, c.Members())
	}
}

func (a *clusterAPI) keys(w http.ResponseWriter, _ *http.Request) {
	if c := a.standalone(w); c != nil {
		writeJSON(w, http.StatusOK, keysReply{Keys: c.KeyIDs()})
	}
}

// keyOpRequest is the body of POST /v1/keys.
type keyOpRequest struct {
	Op  string `json:"op"`
	Key string `json:"key"`
}

func (a *clusterAPI) keyOp(w http.ResponseWriter, r *http.Request) {
	c := a.standalone(w)
	if c == nil {
		return
	}
	var req keyOpRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"op\":\"install|use|remove\",\"key\":\"<base64>\"}"})
		return
	}
	key, err := gossip.ParseKey(req.Key)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	failed, err := c.KeyOp(r.Context(), req.Op, key)
	if err != nil {
		out := map[string]any{"error": err.Error()}
		if len(failed) > 0 {
			per := map[string]string{}
			for n, e := range failed {
				per[n] = e.Error()
			}
			out["failed"] = per
		}
		writeJSON(w, http.StatusBadGateway, out)
		return
	}
	writeJSON(w, http.StatusOK, keysReply{OK: true, Keys: c.KeyIDs()})
}

func (a *clusterAPI) leaveNow(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "leaving"})
	if a.leave != nil {
		a.leave()
	}
}

func memberlistKeyring(key []byte) (*memberlist.Keyring, error) {
	kr, err := memberlist.NewKeyring(nil, key)
	if err != nil {
		return nil, fmt.Errorf("gossip keyring: %w", err)
	}
	return kr, nil
}
