package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadFlags(t *testing.T) {
	cfg, err := loadConfig(strings.Fields("--url ws://a/c,ws://b/c --sessions 500 --connect-rate 2000 --subscribers 10"+
		" --watch 200 --status-rate 5 --hold 20s --settle -1ns --pids 7,8 --pid 9"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.URLs, []string{"ws://a/c", "ws://b/c"}) || !slices.Equal(cfg.PIDs, []int{7, 8}) || cfg.PID != 9 {
		t.Fatalf("urls %v pids %v pid %d", cfg.URLs, cfg.PIDs, cfg.PID)
	}
	if cfg.Sessions != 500 || cfg.ConnectRate != 2000 || cfg.Subscribers != 10 || cfg.Watch != 200 ||
		cfg.StatusRate != 5 || cfg.Hold != 20*time.Second || cfg.Settle >= 0 {
		t.Fatalf("config %+v", cfg)
	}
	for _, bad := range []string{"--pids 7,x", "--pids -3", "--sessions 10 extra"} {
		if _, err := loadConfig(strings.Fields(bad), io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
