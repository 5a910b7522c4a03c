package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/node"
)

// runToken prints a client token: a JWT whose sub is the user, signed with
// an HS256 secret (--secret-file) or a private key (--key), carrying the
// grants given (the "rollcall" claim; docs/protocol.md).
func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs, tf := tokenFlagSet(stderr)
	secretFile, keyFile, user, ttl, kid, aud, iss := tf.secretFile, tf.keyFile, tf.user, tf.ttl, tf.kid, tf.aud, tf.iss
	read, join, send, backend, info := tf.read, tf.join, tf.send, tf.backend, tf.info
	if err := parseFlags(fs, args, os.Environ()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *user == "" || (*secretFile == "") == (*keyFile == "") {
		return errors.New("need --user and one of --secret-file or --key")
	}
	var signer *auth.Signer
	var err error
	if *secretFile != "" {
		var secret []byte
		if secret, err = node.ReadSecretFile(*secretFile); err == nil {
			signer, err = auth.NewSecretSigner(secret)
		}
	} else {
		signer, err = auth.LoadSigningKey(*keyFile)
	}
	if err != nil {
		return err
	}
	spec := auth.TokenSpec{User: *user, TTL: *ttl, KeyID: *kid, Audience: *aud, Issuer: *iss}
	g := auth.GrantsClaim{Read: splitList(*read), Join: splitList(*join), Send: splitList(*send), Backend: *backend}
	if *info != "" {
		if _, err := auth.ParseInfo(json.RawMessage(*info)); err != nil {
			return fmt.Errorf("--info: %w", err)
		}
		g.Info = json.RawMessage(*info)
	}
	if g.Read != nil || g.Join != nil || g.Send != nil || g.Backend || g.Info != nil {
		spec.Grants = &g
	}
	tok, err := signer.Sign(spec, time.Now())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

// tokenCmdFlags are the flags of `rollcall token`.
type tokenCmdFlags struct {
	secretFile, keyFile, user, kid, aud, iss, read, join, send *string
	ttl                                                        *time.Duration
	backend                                                    *bool

	info *string
}

func tokenFlagSet(stderr io.Writer) (*flag.FlagSet, tokenCmdFlags) {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs, tokenCmdFlags{
		secretFile: fs.String("secret-file", "", "file holding the HS256 key (the agent's --secret-file)"),
		keyFile:    fs.String("key", "", "PEM private key to sign with (RSA: RS256, EC P-256: ES256, Ed25519: EdDSA); the agent's --token-keys holds its public key"),
		user:       fs.String("user", "", "the user the token is for (its sub claim)"),
		ttl:        fs.Duration("ttl", time.Hour, "how long the token is valid (its exp claim)"),
		kid:        fs.String("kid", "", "key id header (default: none for --secret-file, the public key's RFC 7638 thumbprint for --key)"),
		aud:        fs.String("aud", "", "audience claim (the agent's --token-audience)"),
		iss:        fs.String("iss", "", "issuer claim (the agent's --token-issuer)"),
		read:       fs.String("read", "", "comma-separated users and groups the token may read: user:NAME, group:NAME or * (its own user always)"),
		join:       fs.String("join", "", "comma-separated groups the token may join, or *"),
		send:       fs.String("send", "", "comma-separated users and groups the token may send to: user:NAME, group:NAME or *"),
		backend:    fs.Bool("backend", false, "a backend token: may read every user and group, and use the HTTP API's backend routes (disconnect, send)"),
		info:       fs.String("info", "", "a JSON object the token vouches for, shown as the info of its sessions (at most 1 KiB)"),
	}
}
