package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// Configuration: every flag of a subcommand can also come from its
// environment variable (ROLLCALL_<FLAG>) and from a YAML config file whose
// keys are the flag names (client-addr: 0.0.0.0:7400). The flag.FlagSet of
// each subcommand is the one definition of its settings; a flag added to it
// is a config key and an environment variable with no further work.
//
// Precedence: command line > environment > config file > flag default.

// envPrefix prefixes the environment variable of every flag: --client-addr
// is also ROLLCALL_CLIENT_ADDR.
const envPrefix = "ROLLCALL_"

// configFlag names the config file on every subcommand that reads one
// (also ROLLCALL_CONFIG).
const configFlag = "config"

// commandLineOnly reports the flags that are actions or name the file
// itself: they are not config keys, and only configFlag has an environment
// variable.
func commandLineOnly(name string) bool {
	switch name {
	case configFlag, "print-config", "validate-config":
		return true
	}
	return false
}

// envName returns the environment variable for a flag name.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// configFlagSets returns a fresh flag set of every subcommand that reads the
// config file. One file serves them all: a key is valid when it is a flag of
// any of them, each subcommand applies the keys that are its own flags, and
// a flag shared by two (http-addr, secret-file) means the same in both, so
// `rollcall members --config agent.yaml` asks the agent that file
// configures.
func configFlagSets() []*flag.FlagSet {
	ac := defaultAgentConfig()
	agent, _ := agentFlagSet(&ac, io.Discard)
	connect, _ := connectFlagSet(io.Discard)
	token, _ := tokenFlagSet(io.Discard)
	members, _, _ := membersFlagSet(io.Discard)
	return []*flag.FlagSet{agent, connect, token, members}
}

// parseFlags parses args into fs, then sets every flag not given on the
// command line from its environment variable when that is set (an empty
// value too: ROLLCALL_HTTP_ADDR= disables HTTP), else from the config file
// named by --config or ROLLCALL_CONFIG. environ is the environment as
// os.Environ returns it. It adds the --config flag to fs.
func parseFlags(fs *flag.FlagSet, args []string, environ []string) error {
	if fs.Lookup(configFlag) == nil {
		fs.String(configFlag, "", "YAML config file whose keys are flag names (also ROLLCALL_CONFIG); flags and the environment override it")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	fromEnv, err := loadEnv(fs, environ)
	if err != nil {
		return err
	}
	path := fs.Lookup(configFlag).Value.String()
	if !given[configFlag] {
		if v, ok := fromEnv[configFlag]; ok {
			path = v
			if err := fs.Set(configFlag, v); err != nil {
				return err
			}
		}
	}
	var fromFile map[string]any
	if path != "" {
		if fromFile, err = loadConfigFile(path); err != nil {
			return err
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || commandLineOnly(f.Name) {
			return
		}
		if v, ok := fromEnv[f.Name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: invalid value: %w", envName(f.Name), v, err))
			}
			return
		}
		if v, ok := fromFile[f.Name]; ok {
			if err := setFromFile(fs, f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("config file %s: %w", path, err))
			}
		}
	})
	return errors.Join(errs...)
}

// loadEnv returns the values of the environment variables of fs's flags
// (and ROLLCALL_CONFIG), by flag name, keeping empty values.
func loadEnv(fs *flag.FlagSet, environ []string) (map[string]string, error) {
	byEnv := map[string]string{envName(configFlag): configFlag}
	fs.VisitAll(func(f *flag.Flag) {
		if !commandLineOnly(f.Name) {
			byEnv[envName(f.Name)] = f.Name
		}
	})
	// An entry without "=" (execve allows one) sets nothing; koanf's
	// provider would panic on it.
	vars := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool { return !strings.Contains(kv, "=") })
	k := koanf.New(".")
	err := k.Load(env.Provider("", env.Opt{
		Prefix:      envPrefix,
		EnvironFunc: func() []string { return vars },
		TransformFunc: func(name, value string) (string, any) {
			// Variables that are no flag of this subcommand belong to
			// another one (or to nothing): not an error.
			return byEnv[name], value
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("read environment: %w", err)
	}
	out := make(map[string]string, len(k.Keys()))
	for _, name := range k.Keys() {
		out[name] = k.String(name)
	}
	return out, nil
}

// loadConfigFile reads a YAML config file and checks it: every key must be
// a flag of a subcommand that reads config (configFlagSets), and every value
// must parse as that flag's type. It returns the file's values by key.
func loadConfigFile(path string) (map[string]any, error) {
	k := koanf.New(".")
	if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	values := k.All()
	owners := configFlagSets()
	keys := make([]string, 0, len(values))
	for key := range values {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var errs []error
	for _, key := range keys {
		owner := ownerOf(owners, key)
		if owner == nil || commandLineOnly(key) {
			errs = append(errs, fmt.Errorf("config file %s: unknown key %q%s", path, key, suggestKey(owners, key)))
			continue
		}
		if err := setFromFile(owner, key, values[key]); err != nil {
			errs = append(errs, fmt.Errorf("config file %s: %w", path, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return values, nil
}

func ownerOf(sets []*flag.FlagSet, key string) *flag.FlagSet {
	for _, fs := range sets {
		if fs.Lookup(key) != nil {
			return fs
		}
	}
	return nil
}

// suggestKey names the closest known key to a misspelt one.
func suggestKey(sets []*flag.FlagSet, key string) string {
	best, bestDist := "", 4
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			if d := editDistance(key, f.Name); d < bestDist && !commandLineOnly(f.Name) {
				best, bestDist = f.Name, d
			}
		})
	}
	if best == "" {
		return " (keys are the flag names of rollcall agent, connect, token, and members, leave and keys)"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// setFromFile sets flag name of fs from a YAML value: a scalar as the text
// the flag would take on the command line; null as empty (http-addr: with no
// value disables HTTP, like http-addr: ""); a list of scalars, for a text
// flag, joined with commas (join: [a:7946, b:7946]).
func setFromFile(fs *flag.FlagSet, name string, v any) error {
	text, err := yamlText(fs.Lookup(name), v)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := fs.Set(name, text); err != nil {
		return fmt.Errorf("%s: invalid value %q: %w", name, text, err)
	}
	return nil
}

func yamlText(f *flag.Flag, v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	case []any:
		if g, ok := f.Value.(flag.Getter); !ok || !isString(g.Get()) {
			return "", errors.New("a list is only allowed for a comma-separated flag")
		}
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := yamlText(f, e)
			switch e.(type) {
			case []any, map[string]any:
				err = errors.New("not a plain value")
			}
			if err != nil {
				return "", fmt.Errorf("list entry %d: %w", i+1, err)
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("want a plain value, not %T", v)
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// isSecretFlag reports whether a flag's value is a secret that printing the
// configuration must not show: a key, a token or a secret itself. Flags that
// name a file holding one (secret-file, keyring-file) are not secrets.
func isSecretFlag(name string) bool {
	for _, s := range []string{"key", "token", "secret"} {
		if name == s || strings.HasSuffix(name, "-"+s) {
			return true
		}
	}
	return false
}

// redacted replaces a secret in printed configuration.
const redacted = "<redacted>"

// effectiveConfig returns the value of every config key of fs, typed as
// YAML shows it (durations as text: "5s"), with secrets redacted when
// redact is set.
func effectiveConfig(fs *flag.FlagSet, redact bool) map[string]any {
	out := map[string]any{}
	fs.VisitAll(func(f *flag.Flag) {
		if commandLineOnly(f.Name) {
			return
		}
		var v any = f.Value.String()
		if g, ok := f.Value.(flag.Getter); ok {
			v = g.Get()
		}
		if d, ok := v.(time.Duration); ok {
			v = d.String()
		}
		if redact && isSecretFlag(f.Name) && f.Value.String() != "" {
			v = redacted
		}
		out[f.Name] = v
	})
	return out
}

// writeConfig prints configuration as YAML, keys sorted.
func writeConfig(w io.Writer, header string, cfg map[string]any) error {
	b, err := yaml.Parser().Marshal(cfg)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
