package node

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// Client tokens are JWTs verified by an auth.Verifier (Config.TokenVerifier,
// or one built from Config.Secret): "sub" is the user, "exp" is required,
// and the "rollcall" claim says what the session may read, join and send
// to (auth.Grants; checks in authz.go). A session lives while its token
// does: the sweeper ends it with token_expired at exp plus the leeway,
// unless a refresh brought a new token first.

// MinSecretBytes is the shortest HS256 key accepted (RFC 7518 §3.2 wants a
// key at least as long as the hash output).
const MinSecretBytes = auth.MinSecretBytes

// ReadSecretFile reads an HS256 key from a file, without trailing
// whitespace (so `echo`-made files work), and checks its length
// (auth.ReadSecretFile).
func ReadSecretFile(path string) ([]byte, error) { return auth.ReadSecretFile(path) }

// NewToken returns an HS256 token for user without a kid or grants, valid
// from now for ttl. auth.Signer mints every other kind.
func NewToken(secret []byte, user string, ttl time.Duration, now time.Time) (string, error) {
	s, err := auth.NewSecretSigner(secret)
	if err != nil {
		return "", err
	}
	return s.Sign(auth.TokenSpec{User: user, TTL: ttl}, now)
}

// newTokenVerifier returns the verifier of a validated cfg: its
// TokenVerifier, or a static one over Secret, or nil on a --dev gateway
// given neither.
func newTokenVerifier(cfg Config) (*auth.Verifier, error) {
	if cfg.TokenVerifier != nil {
		return cfg.TokenVerifier, nil
	}
	if len(cfg.Secret) == 0 {
		return nil, nil
	}
	k, err := auth.NewSecretKey(cfg.Secret, "")
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	ks, err := auth.NewKeySet(k)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return auth.NewStaticVerifier(ks, auth.DefaultOptions()), nil
}

// verifyToken checks that token is valid now and is user's. The error is
// safe to show the client.
func (n *Node) verifyToken(token, user string) (*auth.Identity, error) {
	if n.tokens == nil {
		return nil, errors.New("the gateway has no token keys")
	}
	id, err := n.tokens.Verify(token, n.clock.Now())
	if err != nil {
		return nil, err
	}
	if id.User != user {
		return nil, errors.New("token is for another user")
	}
	return id, nil
}

// setToken makes id the session token of c: its grants and its deadline.
// The deadline is on Node.mono, so a stall of the gateway itself (see
// deadlines.go) delays a token's end by the stall, as it does every
// session's silence deadline.
func (n *Node) setToken(c *conn, id *auth.Identity) {
	c.grants.Store(id.Grants)
	d := n.monoAt(id.ValidUntil)
	if d == 0 {
		d = 1 // 0 means no token deadline
	}
	c.tokenDeadline.Store(d)
}

// handleRefresh replaces the session's token with a new one for the same
// user, before the current one expires: the session's deadline moves to
// the new token's exp, and its grants become the new token's (a
// subscription they no longer allow is dropped). A token that does not
// verify, or is for another user, gets auth_failed and the connection
// closes, as at hello.
func (n *Node) handleRefresh(c *conn, req *protocol.Request) (any, *requestError) {
	if n.cfg.Dev {
		return protocol.RefreshReply{Op: protocol.OpOK, ID: req.ID}, nil
	}
	if len(req.Token) > protocol.MaxTokenLen {
		return nil, errorf(protocol.CodeBadRequest, "token longer than %d bytes", protocol.MaxTokenLen)
	}
	user := c.sess.user // set at hello on this goroutine, never changed
	id, err := n.verifyToken(req.Token, user)
	if err != nil {
		n.stats.authFailed.Add(1)
		n.log.Info("refresh refused", zap.Uint64("conn", c.id), zap.String("remote", c.remote),
			zap.String("user", user), zap.Error(err))
		return nil, errorf(protocol.CodeAuthFailed, "refresh: %v", err)
	}
	lk := lockOf(&n.mu)
	defer lk.unlock()
	if _, rerr := n.ownedLocked(c); rerr != nil {
		lk.unlock()
		return nil, rerr
	}
	before := c.tokenDeadline.Load()
	n.setToken(c, id)
	g := id.Grants
	for u := range c.subUsers {
		if !g.MayRead(user, u) {
			delete(c.subUsers, u)
			n.unwatchUserLocked(u, c)
		}
	}
	for gr := range c.subGroups {
		if !g.MayReadGroup(gr) {
			delete(c.subGroups, gr)
			n.unwatchGroupLocked(gr, c)
		}
	}
	var deltas []crdt.Delta
	if s := c.sess; s.info != id.Info {
		// The new token vouches for other info: the session shows it.
		saved := s.info
		s.info = id.Info
		now := n.clock.Now()
		if d, err := n.replica.PutLocal(n.recordLocked(c, crdt.StateActive, now), now.UnixNano()); err != nil {
			s.info = saved
		} else {
			deltas = append(deltas, d)
			n.markDirtyLocked(user)
		}
	}
	n.unlockAndPublish(&lk, deltas)
	if after := c.tokenDeadline.Load(); after < before {
		// A shorter-lived token: the wheel holds c for a later deadline.
		n.wheel.add(c, c.deadline(int64(n.cfg.Timeout)))
	}
	return protocol.RefreshReply{Op: protocol.OpOK, ID: req.ID, TokenExpiresAt: n.formatTime(id.Expires)}, nil
}

// ReloadTokenKeys rereads the token key files (auth.Verifier.Reload) and
// returns what changed, for the log. On failure the keys in force stay.
// A node whose keys are not from files (Config.Secret alone, or --dev
// without keys) has nothing to reload: nil, nil. Open sessions are not
// affected. Safe to call at any time, from any goroutine (SIGHUP).
func (n *Node) ReloadTokenKeys() (changed []string, err error) {
	if n.tokens == nil {
		return nil, nil
	}
	return n.tokens.Reload()
}

// clientMayReadAll reports whether a client token allows reading every
// user (auth.Grants.MayReadAll: a backend token, or "*" in its read
// grant), as a listing of many users' sessions (GET /v1/sessions) needs.
// Every read is allowed on a --dev gateway.
func (n *Node) clientMayReadAll(token string) bool {
	if n.cfg.Dev {
		return true
	}
	id, ok := n.clientIdentity(token)
	return ok && id.Grants.MayReadAll()
}

// clientIdentity verifies a client token presented outside a session
// (HTTP).
func (n *Node) clientIdentity(token string) (*auth.Identity, bool) {
	if n.tokens == nil || token == "" || len(token) > protocol.MaxTokenLen {
		return nil, false
	}
	id, err := n.tokens.Verify(token, n.clock.Now())
	return id, err == nil
}

// clientMayRead reports whether a client token allows reading user's
// presence: the token verifies now (as at hello: keys, exp, nbf, iat, aud,
// iss) and its grants allow reading user (auth.Grants.MayRead: its own sub,
// a user:NAME or "*" read grant, or a backend token). Every read is allowed
// on a --dev gateway. It is the client half of the HTTP API's read
// authorization (httpReadAllowed); an empty or invalid token reads nothing.
func (n *Node) clientMayRead(token, user string) bool {
	if n.cfg.Dev {
		return true
	}
	id, ok := n.clientIdentity(token)
	return ok && id.Grants.MayRead(id.User, user)
}
