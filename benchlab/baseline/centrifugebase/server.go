// Package centrifugebase is a minimal presence server on Centrifuge
// (github.com/centrifugal/centrifuge), the library behind Centrifugo, as a
// baseline to compare Rollcall against, and a load generator of real
// centrifuge-go clients over WebSocket for it (Load).
//
// Every client connects with its user id as the token (no
// authentication: a benchmark server) and subscribes to a room channel
// with presence and join/leave on; a status change is a publication to
// the room's status channel, which subscribers of the room's users
// subscribe to. Liveness is Centrifuge's: the server
// pings every client each PingInterval and the client pongs; each
// connection refreshes its presence entry every PresenceUpdate.
package centrifugebase

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/centrifugal/centrifuge"
	"go.uber.org/zap"
)

// Path is where the server serves WebSocket connections.
const Path = "/connection/websocket"

// RoomPrefix starts the name of every presence channel.
const RoomPrefix = "room:"

// StatusPrefix starts the name of the channel a room's members publish
// their status changes to (status:N for room:N), without presence: the
// subscribers watching the room's users subscribe to it.
const StatusPrefix = "status:"

// ServerConfig configures Serve. Zero fields take the documented defaults.
type ServerConfig struct {
	// Addr is the HTTP address. Default "127.0.0.1:8000".
	Addr string
	// Redis, when set, is the redis-server address of the Redis presence
	// manager and broker; empty keeps presence and pub/sub in memory.
	Redis string
	// PingInterval is how often the server pings each client (the
	// heartbeat). Default 5s; the pong timeout is a third of it.
	PingInterval time.Duration
	// PresenceUpdate is how often each connection refreshes its presence
	// entry. Default 5s (the same period as Rollcall's heartbeat).
	PresenceUpdate time.Duration
	// PresenceTTL is how long the Redis presence manager keeps an entry
	// not refreshed (the session timeout); whole seconds, at least 1.
	// Default Centrifuge's, 60s.
	PresenceTTL time.Duration
	// PushJoinLeave sends join and leave events to a room's members.
	// Default false: presence is kept, and queried, but not pushed.
	PushJoinLeave bool
	// Logger receives the server's log. Default: none.
	Logger *zap.Logger
}

func (c *ServerConfig) defaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8000"
	}
	if c.PingInterval <= 0 {
		c.PingInterval = 5 * time.Second
	}
	if c.PresenceUpdate <= 0 {
		c.PresenceUpdate = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Server is a running Centrifuge baseline server.
type Server struct {
	node *centrifuge.Node
	ln   net.Listener
	srv  *http.Server
	log  *zap.Logger
}

// NewServer starts the Centrifuge node and listens; Serve serves.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg.defaults()
	log := cfg.Logger
	node, err := centrifuge.New(centrifuge.Config{
		ClientPresenceUpdateInterval: cfg.PresenceUpdate,
		LogLevel:                     centrifuge.LogLevelWarn,
		LogHandler: func(e centrifuge.LogEntry) {
			log.Warn("centrifuge: "+e.Message, zap.Any("fields", e.Fields))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("centrifuge: %w", err)
	}
	if cfg.Redis != "" {
		shard, err := centrifuge.NewRedisShard(node, centrifuge.RedisShardConfig{Address: cfg.Redis})
		if err != nil {
			return nil, fmt.Errorf("centrifuge redis shard %s: %w", cfg.Redis, err)
		}
		var ttl time.Duration
		if cfg.PresenceTTL > 0 {
			ttl = max(cfg.PresenceTTL.Round(time.Second), time.Second)
		}
		pm, err := centrifuge.NewRedisPresenceManager(node, centrifuge.RedisPresenceManagerConfig{
			Shards: []*centrifuge.RedisShard{shard}, PresenceTTL: ttl})
		if err != nil {
			return nil, fmt.Errorf("centrifuge redis presence: %w", err)
		}
		node.SetPresenceManager(pm)
		br, err := centrifuge.NewRedisBroker(node, centrifuge.RedisBrokerConfig{Shards: []*centrifuge.RedisShard{shard}})
		if err != nil {
			return nil, fmt.Errorf("centrifuge redis broker: %w", err)
		}
		node.SetBroker(br)
	}
	node.OnConnecting(func(_ context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		if e.Token == "" {
			return centrifuge.ConnectReply{}, centrifuge.DisconnectInvalidToken
		}
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{UserID: e.Token}}, nil
	})
	node.OnConnect(func(c *centrifuge.Client) {
		c.OnSubscribe(func(e centrifuge.SubscribeEvent, cb centrifuge.SubscribeCallback) {
			switch {
			case strings.HasPrefix(e.Channel, RoomPrefix):
				cb(centrifuge.SubscribeReply{Options: centrifuge.SubscribeOptions{
					EmitPresence: true, EmitJoinLeave: true, PushJoinLeave: cfg.PushJoinLeave}}, nil)
			case strings.HasPrefix(e.Channel, StatusPrefix):
				cb(centrifuge.SubscribeReply{}, nil)
			default:
				cb(centrifuge.SubscribeReply{}, centrifuge.ErrorPermissionDenied)
			}
		})
		// a status change is a publication to the status channel of the
		// client's room, through the broker to every node's subscribers
		c.OnPublish(func(e centrifuge.PublishEvent, cb centrifuge.PublishCallback) {
			if !strings.HasPrefix(e.Channel, StatusPrefix) {
				cb(centrifuge.PublishReply{}, centrifuge.ErrorPermissionDenied)
				return
			}
			cb(centrifuge.PublishReply{}, nil)
		})
		c.OnPresence(func(e centrifuge.PresenceEvent, cb centrifuge.PresenceCallback) {
			cb(centrifuge.PresenceReply{}, nil)
		})
	})
	if err := node.Run(); err != nil {
		return nil, fmt.Errorf("centrifuge run: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		_ = node.Shutdown(context.Background())
		return nil, fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{
		CheckOrigin:    func(*http.Request) bool { return true },
		PingPongConfig: centrifuge.PingPongConfig{PingInterval: cfg.PingInterval, PongTimeout: cfg.PingInterval / 3},
	}))
	s := &Server{node: node, ln: ln, log: log, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	log.Info("centrifuge baseline started", zap.String("addr", ln.Addr().String()),
		zap.String("presence", map[bool]string{true: "redis " + cfg.Redis, false: "memory"}[cfg.Redis != ""]),
		zap.Duration("ping", cfg.PingInterval), zap.Duration("presence_update", cfg.PresenceUpdate))
	return s, nil
}

// URL is the server's WebSocket URL.
func (s *Server) URL() string { return "ws://" + s.ln.Addr().String() + Path }

// Presence is the presence of a room channel, as the presence manager
// holds it: the number of clients.
func (s *Server) Presence(ctx context.Context, room string) (int, error) {
	r, err := s.node.PresenceStats(RoomPrefix + room)
	if err != nil {
		return 0, fmt.Errorf("presence of %s: %w", room, err)
	}
	return r.NumClients, nil
}

// Serve serves until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		_ = s.node.Shutdown(context.Background())
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(sctx)
	if err := s.node.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("centrifuge shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}
