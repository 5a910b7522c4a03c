package auth

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultLeeway is the clock skew allowed by default when exp, nbf and iat
// are checked: small enough that an expired token is refused within
// seconds, large enough for NTP-synced clocks.
const DefaultLeeway = 5 * time.Second

// Options are the claim checks of a Verifier.
type Options struct {
	// Audience, when not empty, must be one of the token's "aud" values
	// (a token without aud is refused). Empty: aud is not checked.
	Audience string
	// Issuer, when not empty, must equal the token's "iss". Empty: iss is
	// not checked.
	Issuer string
	// Leeway is the clock skew allowed on exp, nbf and iat. Zero (or
	// negative) allows none. DefaultOptions sets DefaultLeeway (5s).
	Leeway time.Duration
}

// DefaultOptions returns the Options of a verifier that checks neither aud
// nor iss and allows DefaultLeeway of clock skew.
func DefaultOptions() Options {
	return Options{Leeway: DefaultLeeway}
}

// leeway returns the effective leeway.
func (o Options) leeway() time.Duration {
	return max(o.Leeway, 0)
}

// Identity is what a verified token says.
type Identity struct {
	// User is the token's "sub".
	User string
	// KeyID is the kid of the key that verified it ("" for a kid-less
	// secret).
	KeyID string
	// Expires is the token's "exp". The token is accepted until Expires
	// plus the leeway (ValidUntil).
	Expires time.Time
	// ValidUntil is Expires plus the verifier's leeway: the last instant
	// the token is accepted, and when a session that holds it ends.
	ValidUntil time.Time
	// Grants is what the token's "rollcall" claim allows.
	Grants *Grants
	// Info is the claim's info, compact JSON ("" for none): what the
	// issuer vouches for about the user (ParseInfo).
	Info string
}

// claims is the JSON of a token's payload.
type claims struct {
	jwt.RegisteredClaims
	Rollcall *GrantsClaim `json:"rollcall,omitempty"`
}

// Verifier verifies client tokens against a KeySet it can reload. Safe for
// concurrent use: Verify reads the current keys without a lock; Reload
// swaps in a whole new set, or none.
type Verifier struct {
	opts Options
	src  Source // empty for a static verifier

	keys     atomic.Pointer[KeySet]
	reloadMu sync.Mutex // serializes Reload
}

// NewVerifier reads the keys of src (LoadKeys) and returns a verifier that
// Reload can refresh from the same files.
func NewVerifier(src Source, opts Options) (*Verifier, error) {
	if src.empty() {
		return nil, errors.New("token keys: no secret file and no key file")
	}
	ks, err := LoadKeys(src)
	if err != nil {
		return nil, err
	}
	return newVerifier(ks, src, opts), nil
}

// NewStaticVerifier returns a verifier over fixed keys; its Reload changes
// nothing.
func NewStaticVerifier(ks *KeySet, opts Options) *Verifier {
	return newVerifier(ks, Source{}, opts)
}

func newVerifier(ks *KeySet, src Source, opts Options) *Verifier {
	v := &Verifier{opts: opts, src: src}
	v.keys.Store(ks)
	return v
}

// Keys returns the current key set.
func (v *Verifier) Keys() *KeySet { return v.keys.Load() }

// Options returns the verifier's options.
func (v *Verifier) Options() Options { return v.opts }

// Leeway returns the effective clock skew allowance.
func (v *Verifier) Leeway() time.Duration { return v.opts.leeway() }

// Reload re-reads the key files. On success the new keys replace the old
// ones at once (a token being verified concurrently sees one set or the
// other) and changed describes what differs ("added key k2 ES256 from
// keys.jwks", "removed key ..."; empty when nothing did). On failure the old
// keys stay in force and the error says why. Sessions already open are not
// affected: keys are checked at hello and refresh.
func (v *Verifier) Reload() (changed []string, err error) {
	if v.src.empty() {
		return nil, nil
	}
	v.reloadMu.Lock()
	defer v.reloadMu.Unlock()
	next, err := LoadKeys(v.src)
	if err != nil {
		return nil, fmt.Errorf("reload token keys (the old keys stay in force): %w", err)
	}
	changed = v.keys.Load().diff(next)
	v.keys.Store(next)
	return changed, nil
}

// Verify checks token at time now and returns what it says. The token must
// be a JWS of an accepted alg ("none" and every alg not in Algorithms are
// refused) signed by the key its kid names, or, without a kid, by the only
// key of its alg. Its claims must hold: a non-empty sub; exp, required, not
// past (beyond the leeway); nbf, when present, not in the future; iat, when
// present, not in the future; aud and iss when the options name them; a
// well-formed rollcall claim when present. The error is safe to show the
// client: it never contains key material.
func (v *Verifier) Verify(token string, now time.Time) (*Identity, error) {
	if token == "" {
		return nil, errors.New("missing token")
	}
	ks := v.keys.Load()
	popts := []jwt.ParserOption{
		jwt.WithValidMethods(Algorithms()),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(v.opts.leeway()),
		jwt.WithTimeFunc(func() time.Time { return now }),
	}
	if v.opts.Audience != "" {
		popts = append(popts, jwt.WithAudience(v.opts.Audience))
	}
	if v.opts.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(v.opts.Issuer))
	}
	var c claims
	var kid string
	_, err := jwt.NewParser(popts...).ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		if raw, ok := t.Header["kid"]; ok {
			s, ok := raw.(string)
			if !ok {
				return nil, errors.New("kid is not a string")
			}
			kid = s
		}
		return ks.lookup(t.Method.Alg(), kid)
	})
	if err != nil {
		return nil, fmt.Errorf("invalid token: %w", err)
	}
	if c.Subject == "" {
		return nil, errors.New("invalid token: no sub")
	}
	grants, err := ParseGrants(c.Rollcall)
	if err != nil {
		return nil, fmt.Errorf("invalid token: %w", err)
	}
	var info string
	if c.Rollcall != nil {
		if info, err = ParseInfo(c.Rollcall.Info); err != nil {
			return nil, fmt.Errorf("invalid token: %w", err)
		}
	}
	exp := c.ExpiresAt.Time
	return &Identity{
		User: c.Subject, KeyID: kid, Expires: exp, ValidUntil: exp.Add(v.opts.leeway()), Grants: grants, Info: info,
	}, nil
}
