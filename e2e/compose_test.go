package e2e

// Driving the compose cluster from the test: compose up/down, the docker
// commands of the drills, and the gateways' addresses.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// composeFile is deploy/docker-compose.yml, from this package's directory.
const composeFile = "../deploy/docker-compose.yml"

// gatewayNames returns the compose services, in the order the drills use
// them.
func gatewayNames() []string { return []string{"gw1", "gw2", "gw3"} }

// cluster is one compose project of deploy/docker-compose.yml.
type cluster struct {
	t       *testing.T
	compose []string // "docker-compose" or "docker", "compose"
	project string
	env     []string // RC_* settings for the compose file
	// published: reach the gateways through their published 127.0.0.1
	// ports instead of their addresses on the clients network (for a
	// Docker engine whose bridge networks the host cannot route to).
	published bool
	gossipNet string // the gossip network's first three octets

	mu  sync.Mutex
	ids map[string]string // service -> container id, from up on
}

// composeCommand is the compose CLI: ROLLCALL_E2E_COMPOSE, else the
// `docker compose` plugin if it answers, else docker-compose (v1).
func composeCommand() []string {
	if s := os.Getenv("ROLLCALL_E2E_COMPOSE"); s != "" {
		return strings.Fields(s)
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	return []string{"docker-compose"}
}

func (c *cluster) composeArgs(args ...string) []string {
	return append(append(append([]string{}, c.compose[1:]...), "-f", composeFile, "-p", c.project), args...)
}

// run runs a command with the cluster's environment and returns its
// combined output.
func (c *cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (c *cluster) composeRun(ctx context.Context, args ...string) (string, error) {
	return c.run(ctx, c.compose[0], c.composeArgs(args...)...)
}

func (c *cluster) docker(ctx context.Context, args ...string) (string, error) {
	return c.run(ctx, "docker", args...)
}

// up starts the cluster and registers its removal (down -v), with the
// gateways' logs saved first if the test failed.
func (c *cluster) up(ctx context.Context) {
	c.t.Helper()
	c.t.Cleanup(func() {
		if _, err := c.composeRun(context.Background(), "down", "-v", "--remove-orphans", "--timeout", "5"); err != nil {
			c.t.Errorf("remove the cluster: %v", err)
		}
	})
	c.t.Cleanup(func() {
		if !c.t.Failed() {
			return
		}
		dir, err := os.MkdirTemp("", "rollcall-e2e-logs-")
		if err != nil {
			return
		}
		for _, gw := range gatewayNames() {
			out, _ := c.composeRun(context.Background(), "logs", "--no-color", "--timestamps", gw)
			os.WriteFile(filepath.Join(dir, gw+".log"), []byte(out), 0o644)
		}
		c.t.Logf("gateway logs kept in %s", dir)
	})
	if out, err := c.composeRun(ctx, "up", "-d"); err != nil {
		c.t.Fatalf("compose up: %v\n%s", err, out)
	}
	ids := map[string]string{}
	for _, gw := range gatewayNames() {
		out, err := c.composeRun(ctx, "ps", "-q", gw)
		if ids[gw] = strings.TrimSpace(out); err != nil || ids[gw] == "" {
			c.t.Fatalf("container of %s: %q %v", gw, out, err)
		}
	}
	c.mu.Lock()
	c.ids = ids
	c.mu.Unlock()
}

// id returns a service's container id, read once at up: a container keeps
// its id when it is killed, started or restarted.
func (c *cluster) id(gw string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids[gw]
}

// inspect is what the drills read of `docker inspect`.
type inspect struct {
	State struct {
		Status string
		Health *struct{ Status string }
	}
	Config struct {
		User string
		Env  []string
	}
	NetworkSettings struct {
		Networks map[string]struct{ IPAddress string }
		Ports    map[string][]struct{ HostIP, HostPort string }
	}
}

func (c *cluster) inspect(ctx context.Context, gw string) (inspect, error) {
	var ins []inspect
	out, err := c.docker(ctx, "inspect", c.id(gw))
	if err != nil {
		return inspect{}, err
	}
	if err := json.Unmarshal([]byte(out), &ins); err != nil || len(ins) != 1 {
		return inspect{}, fmt.Errorf("docker inspect %s: %v", gw, err)
	}
	return ins[0], nil
}

// networkName returns the compose network whose name ends in _suffix
// (compose prefixes it with the project name, normalized differently by
// v1 and v2).
func networkName(ins inspect, suffix string) string {
	for name := range ins.NetworkSettings.Networks {
		if strings.HasSuffix(name, "_"+suffix) {
			return name
		}
	}
	return ""
}

// addrs returns a gateway's client and HTTP addresses as the test reaches
// them. They can change when its container restarts.
func (c *cluster) addrs(ctx context.Context, gw string) (client, http string, err error) {
	ins, err := c.inspect(ctx, gw)
	if err != nil {
		return "", "", err
	}
	if c.published {
		p := func(port string) string {
			for _, b := range ins.NetworkSettings.Ports[port+"/tcp"] {
				return net.JoinHostPort(b.HostIP, b.HostPort)
			}
			return ""
		}
		client, http = p("7400"), p("7401")
	} else if n := networkName(ins, "clients"); n != "" {
		ip := ins.NetworkSettings.Networks[n].IPAddress
		client, http = net.JoinHostPort(ip, "7400"), net.JoinHostPort(ip, "7401")
	}
	if client == "" || http == "" {
		return "", "", fmt.Errorf("%s has no address yet", gw)
	}
	return client, http, nil
}

// health returns the container's health status (starting, healthy,
// unhealthy) or its state when it is not running.
func (c *cluster) health(ctx context.Context, gw string) string {
	ins, err := c.inspect(ctx, gw)
	if err != nil {
		return err.Error()
	}
	if ins.State.Status != "running" || ins.State.Health == nil {
		return ins.State.Status
	}
	return ins.State.Health.Status
}

// access is how the drills reach a gateway's ports: TLS when the compose
// file turns it on (ROLLCALL_TLS_CERT in the containers' environment), and
// the admin token for the HTTP API when make secrets made one.
type access struct {
	tls        *tls.Config // nil: plain TCP
	adminToken string      // sent as Authorization: Bearer
}

// tlsFor returns the TLS configuration for dialing gateway gw (whose
// certificate names it), or nil for plain TCP.
func (a access) tlsFor(gw string) *tls.Config {
	if a.tls == nil {
		return nil
	}
	c := a.tls.Clone()
	c.ServerName = gw
	return c
}

// httpGet decodes gateway gw's JSON answer to GET path at addr.
func (a access) httpGet(ctx context.Context, gw, addr, path string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	scheme := "http"
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	if c := a.tlsFor(gw); c != nil {
		scheme, tr.TLSClientConfig = "https", c
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+path, nil)
	if err != nil {
		return err
	}
	if a.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+a.adminToken)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s", path, resp.Status, raw)
	}
	return json.Unmarshal(raw, out)
}
