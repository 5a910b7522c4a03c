package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/node"
)

// agentConfigFrom parses agent flags (with --dev) and environment, and
// builds the node configuration.
func agentConfigFrom(t *testing.T, args []string, env map[string]string) (node.Config, error) {
	t.Helper()
	af := defaultAgentConfig()
	fs, _ := agentFlagSet(&af, io.Discard)
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	if err := parseFlags(fs, append([]string{"--dev"}, args...), environ); err != nil {
		return node.Config{}, err
	}
	return af.nodeConfig(zap.NewNop())
}

// The limit and size flags default to the node's defaults, set their
// Config fields (from flags or environment), and bad values are refused
// with an error that names the flag.
func TestLimitFlags(t *testing.T) {
	cfg, err := agentConfigFrom(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	def := node.DefaultConfig()
	if cfg.Limits() != def.Limits() || cfg.MaxLineBytes != def.MaxLineBytes || cfg.OutboundQueue != def.OutboundQueue ||
		cfg.OutboundQueueBytes != def.OutboundQueueBytes || cfg.WriteTimeout != def.WriteTimeout ||
		cfg.HandshakeTimeout != def.HandshakeTimeout || cfg.EventCoalesce != def.EventCoalesce {
		t.Fatalf("defaults differ from node.DefaultConfig: %+v", cfg)
	}

	cfg, err = agentConfigFrom(t, []string{
		"--request-rate", "20", "--request-burst", "40", "--max-sessions-per-user", "-1",
		"--max-line-bytes", "2048", "--outbound-queue", "16", "--outbound-queue-bytes", "65536",
		"--write-timeout", "3s", "--handshake-timeout", "2s", "--event-coalesce", "0",
	}, map[string]string{"ROLLCALL_MAX_CONNECTIONS_PER_IP": "50"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RequestRate != 20 || cfg.RequestBurst != 40 || cfg.MaxSessionsPerUser != -1 || cfg.MaxConnectionsPerIP != 50 ||
		cfg.MaxLineBytes != 2048 || cfg.OutboundQueue != 16 || cfg.OutboundQueueBytes != 65536 ||
		cfg.WriteTimeout != 3*time.Second || cfg.HandshakeTimeout != 2*time.Second || cfg.EventCoalesce != 0 {
		t.Fatalf("flags not applied: %+v", cfg)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--request-rate", "0"}, "--request-rate 0:"},
		{[]string{"--request-rate", "NaN"}, "--request-rate NaN:"},
		{[]string{"--request-rate", "0.5"}, "--request-rate 0.5: must allow at least 4 requests per --heartbeat"},
		{[]string{"--request-burst", "0"}, "--request-burst 0:"},
		{[]string{"--max-sessions-per-user", "0"}, "--max-sessions-per-user 0:"},
		{[]string{"--max-connections-per-ip", "0"}, "--max-connections-per-ip 0:"},
		{[]string{"--max-line-bytes", "100"}, "--max-line-bytes 100: must be at least 1024"},
		{[]string{"--outbound-queue", "0"}, "--outbound-queue 0:"},
		{[]string{"--outbound-queue-bytes", "65536"}, "--outbound-queue-bytes 65536: must exceed --max-line-bytes (65536)"},
		{[]string{"--write-timeout", "0s"}, "--write-timeout 0s:"},
		{[]string{"--handshake-timeout", "-1s"}, "--handshake-timeout -1s:"},
		{[]string{"--event-coalesce", "-1ms"}, "--event-coalesce -1ms:"},
	} {
		if _, err := agentConfigFrom(t, tc.args, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}
