package webhook

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Config configures a gateway's webhooks. Take DefaultConfig and set URLs
// and Secrets; Validate fills zero values with the defaults.
type Config struct {
	// URLs receive every selected event, each on its own: an endpoint
	// that fails does not hold the others back. http or https. Empty:
	// webhooks are off.
	URLs []string

	// Secrets sign each request, one v1 signature per secret (the first
	// is the current one; list the next beside it while rotating). At
	// least one when URLs are set; each MinSecretBytes to MaxSecretBytes.
	Secrets [][]byte

	// Events are the event types sent. Default AllTypes.
	Events Types

	// Concurrency is the requests in flight at once, over all URLs, and
	// the keep-alive connections kept per URL. More gets through a burst
	// to a slow receiver sooner. Default 8.
	Concurrency int

	// Queue bounds the deliveries (an event to one URL) waiting, in
	// flight or waiting to be retried. An event that finds it full is
	// dropped and counted: a receiver that is down for long costs this
	// much memory (about 1 KiB a delivery), not more. Default 10,000.
	Queue int

	// MaxAttempts bounds the attempts of one delivery, the first
	// included; then it is given up and counted failed. Default 10.
	MaxAttempts int

	// MinBackoff and MaxBackoff bound the wait before a retry: MinBackoff
	// after the first failure, doubling with each, at most MaxBackoff,
	// each with up to half of it taken off at random (so a receiver that
	// failed everyone at once is not retried by everyone at once). A
	// Retry-After the receiver gives, up to MaxBackoff, is waited
	// instead when longer. Defaults 1s and 5m: the nine waits between
	// ten attempts add up to 4 to 9 minutes.
	MinBackoff time.Duration
	MaxBackoff time.Duration

	// Timeout bounds one attempt, from the request to the end of the
	// response's headers. Default 15s.
	Timeout time.Duration

	// Handoff is how long, after this gateway's view of the live
	// gateways changed, it also announces the users it announced before
	// the change; and how long it keeps the events it left to another
	// gateway, to send them itself if that gateway fails or leaves
	// (Handoff, Shadow in notifier.go). It should exceed the time the
	// cluster takes to detect a failed gateway (the gossip lease) and a
	// joining gateway's time to get ready. Longer sends more duplicates
	// around a membership change; shorter may lose changes then. Default
	// 30s.
	Handoff time.Duration

	// ShadowSize bounds the events kept for Handoff (Shadow): about the
	// changes the whole cluster announces within Handoff. Past it the
	// oldest are pushed out and counted. Default 16,384.
	ShadowSize int

	// Gateway names the sender in each request's User-Agent
	// ("rollcall-webhook (gateway NAME)"). The node sets it.
	Gateway string

	// Report, when set, is told of each delivery given up (err says
	// why). It is called from a delivery goroutine and must not block.
	Report func(url string, ev *Event, attempts int, err error)
}

// Defaults.
const (
	DefaultConcurrency = 8
	DefaultQueue       = 10_000
	DefaultMaxAttempts = 10
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 5 * time.Minute
	DefaultTimeout     = 15 * time.Second
	DefaultHandoff     = 30 * time.Second
	DefaultShadowSize  = 16_384
)

// DefaultConfig returns the defaults, without URLs (webhooks off).
func DefaultConfig() Config {
	return Config{
		Events:      AllTypes,
		Concurrency: DefaultConcurrency,
		Queue:       DefaultQueue,
		MaxAttempts: DefaultMaxAttempts,
		MinBackoff:  DefaultMinBackoff,
		MaxBackoff:  DefaultMaxBackoff,
		Timeout:     DefaultTimeout,
		Handoff:     DefaultHandoff,
		ShadowSize:  DefaultShadowSize,
	}
}

// Enabled reports whether any URL is configured.
func (c *Config) Enabled() bool { return len(c.URLs) > 0 }

// Validate fills zero values with the defaults and rejects contradictions.
// A Config without URLs is valid (webhooks off) whatever else it holds.
func (c *Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	d := DefaultConfig()
	if c.Events == 0 {
		c.Events = d.Events
	}
	if c.Concurrency == 0 {
		c.Concurrency = d.Concurrency
	}
	if c.Queue == 0 {
		c.Queue = d.Queue
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = d.MinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(d.MaxBackoff, c.MinBackoff)
	}
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.Handoff == 0 {
		c.Handoff = d.Handoff
	}
	if c.ShadowSize == 0 {
		c.ShadowSize = d.ShadowSize
	}
	var errs []error
	for _, u := range c.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("webhook URL %q: want an http or https URL with a host", u))
		}
	}
	if len(c.Secrets) == 0 {
		errs = append(errs, errors.New("webhook URLs need a secret (--webhook-secret-file)"))
	}
	for i, k := range c.Secrets {
		if len(k) < MinSecretBytes || len(k) > MaxSecretBytes {
			errs = append(errs, fmt.Errorf("webhook secret %d: %d bytes, want %d to %d", i+1, len(k), MinSecretBytes, MaxSecretBytes))
		}
	}
	if c.Events&^AllTypes != 0 {
		errs = append(errs, fmt.Errorf("webhook events: unknown types in %#x", uint8(c.Events)))
	}
	if c.Concurrency < 0 || c.Queue < 0 || c.MaxAttempts < 0 || c.ShadowSize < 0 {
		errs = append(errs, errors.New("webhook concurrency, queue, attempts and shadow size must not be negative"))
	}
	if c.MinBackoff < 0 || c.MaxBackoff < c.MinBackoff || c.Timeout < 0 || c.Handoff < 0 {
		errs = append(errs, fmt.Errorf("webhook backoff %v..%v, timeout %v, handoff %v: want 0 < min <= max and no negative duration",
			c.MinBackoff, c.MaxBackoff, c.Timeout, c.Handoff))
	}
	return errors.Join(errs...)
}
