// Package auth verifies Rollcall client tokens and decides what a verified
// token allows.
//
// Tokens are JWTs (RFC 7519) signed with one of the keys of a KeySet: HS256
// secrets, and RS256, ES256 and EdDSA (Ed25519) public keys read from PEM or
// JWKS files, each with a key id (kid). Several keys may be valid at once,
// so keys rotate without a flag day.
//
// The package is pure except for the loaders (LoadKeys, NewVerifier,
// Verifier.Reload, ReadSecretFile, LoadSigningKey), which read key files:
// verification and permission checks take the time as an argument and touch
// nothing else. Nothing here logs; callers do.
//
// The driving calls, as the gateway makes them:
//
//	opts := auth.DefaultOptions()        // 5s of clock skew allowed
//	opts.Audience = "rollcall"
//	v, err := auth.NewVerifier(auth.Source{KeyFiles: files}, opts)
//	id, err := v.Verify(token, now)      // at hello and at refresh
//	id.Grants.MayRead(id.User, "bob")    // before get, sub, locate, ...
//	changed, err := v.Reload()           // on SIGHUP: new keys, or the old ones kept
package auth
