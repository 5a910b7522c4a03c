package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rollcall/rollcall/node"
)

// runToken prints a client token: an HS256 JWT whose sub is the user.
func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs, tf := tokenFlagSet(stderr)
	secretFile, user, ttl := tf.secretFile, tf.user, tf.ttl
	if err := parseFlags(fs, args, os.Environ()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *secretFile == "" || *user == "" {
		return errors.New("need --secret-file and --user")
	}
	secret, err := node.ReadSecretFile(*secretFile)
	if err != nil {
		return err
	}
	tok, err := node.NewToken(secret, *user, *ttl, time.Now())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

// tokenFlags are the flags of `rollcall token`.
type tokenFlags struct {
	secretFile, user *string
	ttl              *time.Duration
}

func tokenFlagSet(stderr io.Writer) (*flag.FlagSet, tokenFlags) {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs, tokenFlags{
		secretFile: fs.String("secret-file", "", "file holding the HS256 key (the agent's --secret-file)"),
		user:       fs.String("user", "", "the user the token is for (its sub claim)"),
		ttl:        fs.Duration("ttl", time.Hour, "how long the token is valid"),
	}
}
