package main

import (
	"flag"

	"github.com/rollcall/rollcall/internal/tlsconf"
)

// clientTLSFlags adds the TLS flags every client tool shares (connect,
// members, leave, keys) to fs. The flag values build the client
// configuration with (*tlsconf.ClientFiles).Config.
func clientTLSFlags(fs *flag.FlagSet) *tlsconf.ClientFiles {
	f := &tlsconf.ClientFiles{}
	fs.BoolVar(&f.Enabled, "tls", false, "speak TLS, verifying the agent's certificate against the system's roots")
	fs.StringVar(&f.CAFile, "tls-ca", "", "PEM CA certificate(s) to verify the agent's certificate against instead of the system's roots (implies --tls)")
	fs.StringVar(&f.ServerName, "tls-server-name", "", "name the agent's certificate must carry (default: the host of the address; implies --tls)")
	fs.StringVar(&f.CertFile, "tls-cert", "", "PEM client certificate for an agent that requires one (mutual TLS; implies --tls)")
	fs.StringVar(&f.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	return f
}
