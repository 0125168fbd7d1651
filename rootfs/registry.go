package rootfs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// RegistryConfig is where and how images are pulled: containerd's
// hosts.toml in podlab's YAML config, plus limits and a docker config.json
// for credentials.
type RegistryConfig struct {
	// DockerConfig is a docker config.json whose "auths" give credentials
	// per registry host ("" = none).
	DockerConfig string `json:"dockerConfig,omitempty"`
	// RequestTimeoutSeconds bounds each request to a registry: connecting,
	// waiting for the response headers, and any wait for the next bytes of
	// a body. A registry that stalls longer fails the request (then the
	// next endpoint is tried). 0 = DefaultRequestTimeout.
	RequestTimeoutSeconds int `json:"requestTimeoutSeconds,omitempty"`
	// MaxManifestBytes caps a manifest or index (0 = DefaultMaxManifestSize);
	// the image config is held to the same limit.
	MaxManifestBytes int64 `json:"maxManifestBytes,omitempty"`
	// MaxLayerBytes caps a layer blob as downloaded (compressed; 0 =
	// DefaultMaxLayerSize). The uncompressed size is capped by the store's
	// MaxLayerSize, as for an import.
	MaxLayerBytes int64 `json:"maxLayerBytes,omitempty"`
	// Hosts configures registry hosts by the name images use ("docker.io",
	// "registry.k8s.io", "127.0.0.1:5000"), as containerd's
	// certs.d/<host>/hosts.toml does.
	Hosts map[string]RegistryHost `json:"hosts,omitempty"`
}

// RegistryHost is one registry host's hosts.toml.
type RegistryHost struct {
	// Server is the upstream, tried after every endpoint (containerd's
	// `server`): "" = https://<host> (for docker.io
	// https://registry-1.docker.io).
	Server string `json:"server,omitempty"`
	// SkipVerify and CAFile apply to the server.
	SkipVerify bool   `json:"skipVerify,omitempty"`
	CAFile     string `json:"caFile,omitempty"`
	// Endpoints are mirrors, tried in order before the server
	// (containerd's [host."…"] tables).
	Endpoints []RegistryEndpoint `json:"endpoints,omitempty"`
}

// RegistryEndpoint is one mirror. The URL's scheme decides the protocol:
// https://, or http:// for plain HTTP (the explicit mark containerd's
// hosts.toml uses too); without a scheme, https.
type RegistryEndpoint struct {
	URL string `json:"url"`
	// Capabilities: "pull" (fetch blobs and manifests by digest) and
	// "resolve" (turn a tag into a digest). Default both.
	Capabilities []string `json:"capabilities,omitempty"`
	SkipVerify   bool     `json:"skipVerify,omitempty"`
	CAFile       string   `json:"caFile,omitempty"`
}

// Defaults of RegistryConfig's limits.
const (
	DefaultRequestTimeout  = 30 * time.Second
	DefaultMaxManifestSize = 4 << 20
)

// RequestTimeout is the per-request bound.
func (c *RegistryConfig) RequestTimeout() time.Duration {
	if c == nil || c.RequestTimeoutSeconds <= 0 {
		return DefaultRequestTimeout
	}
	return time.Duration(c.RequestTimeoutSeconds) * time.Second
}

func (c *RegistryConfig) maxManifest() int64 {
	if c == nil || c.MaxManifestBytes <= 0 {
		return DefaultMaxManifestSize
	}
	return c.MaxManifestBytes
}

func (c *RegistryConfig) maxLayer() int64 {
	if c == nil || c.MaxLayerBytes <= 0 {
		return DefaultMaxLayerSize
	}
	return c.MaxLayerBytes
}

// Validate checks the hosts section: what a pull would otherwise trip over.
func (c *RegistryConfig) Validate() error {
	if c == nil {
		return nil
	}
	if c.RequestTimeoutSeconds < 0 || c.MaxManifestBytes < 0 || c.MaxLayerBytes < 0 {
		return errors.New("registry: requestTimeoutSeconds, maxManifestBytes and maxLayerBytes must not be negative")
	}
	for host, h := range c.Hosts {
		if !validDomain(host) {
			return fmt.Errorf("registry.hosts[%q]: not a registry host[:port]", host)
		}
		if h.Server != "" {
			if _, err := parseEndpointURL(h.Server); err != nil {
				return fmt.Errorf("registry.hosts[%q].server: %w", host, err)
			}
		}
		for i, e := range h.Endpoints {
			if _, err := parseEndpointURL(e.URL); err != nil {
				return fmt.Errorf("registry.hosts[%q].endpoints[%d].url: %w", host, i, err)
			}
			for _, cp := range e.Capabilities {
				if cp != "pull" && cp != "resolve" {
					return fmt.Errorf("registry.hosts[%q].endpoints[%d].capabilities: %q is neither pull nor resolve", host, i, cp)
				}
			}
		}
	}
	return nil
}

// parseEndpointURL splits "https://host:port" into scheme and host.
func parseEndpointURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("%q: scheme must be https or http", s)
	}
	if u.Host == "" || !validDomain(u.Host) {
		return nil, fmt.Errorf("%q: no valid host[:port]", s)
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" && p != "/v2" {
		return nil, fmt.Errorf("%q: a path prefix is not supported (the registry API must be at /v2/)", s)
	}
	return u, nil
}

// endpoint is one place a pull may go, in order: the mirrors, then the
// upstream.
type endpoint struct {
	host    string // host[:port] the requests go to
	scheme  string // "https", "http", or "" (https, falling back to http: a loopback upstream)
	pull    bool
	resolve bool
	mirror  bool
	tls     *tls.Config
	caFile  string // what tls.RootCAs was read from, for the transport cache
}

func (e *endpoint) String() string {
	switch e.scheme {
	case "":
		return e.host
	default:
		return e.scheme + "://" + e.host
	}
}

// isLoopback reports whether host[:port] is this machine.
func isLoopback(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.Trim(h, "[]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// endpoints lists where to pull images of domain from.
func (c *RegistryConfig) endpoints(domain string) ([]*endpoint, error) {
	var h RegistryHost
	if c != nil {
		h = c.Hosts[domain]
	}
	var out []*endpoint
	for i, e := range h.Endpoints {
		u, err := parseEndpointURL(e.URL)
		if err != nil {
			return nil, fmt.Errorf("registry.hosts[%q].endpoints[%d]: %w", domain, i, err)
		}
		ep := &endpoint{host: u.Host, scheme: u.Scheme, mirror: true, pull: len(e.Capabilities) == 0, resolve: len(e.Capabilities) == 0}
		for _, cp := range e.Capabilities {
			switch cp {
			case "pull":
				ep.pull = true
			case "resolve":
				ep.resolve = true
			}
		}
		ep.caFile = e.CAFile
		if ep.tls, err = tlsConfig(e.SkipVerify, e.CAFile); err != nil {
			return nil, fmt.Errorf("registry.hosts[%q].endpoints[%d]: %w", domain, i, err)
		}
		out = append(out, ep)
	}
	up := &endpoint{host: domain, pull: true, resolve: true, scheme: "https"}
	if domain == DefaultDomain {
		up.host = "registry-1.docker.io"
	}
	if h.Server != "" {
		u, err := parseEndpointURL(h.Server)
		if err != nil {
			return nil, fmt.Errorf("registry.hosts[%q].server: %w", domain, err)
		}
		up.host, up.scheme = u.Host, u.Scheme
	} else if isLoopback(domain) {
		// As containerd and Docker: a registry on this machine may speak
		// plain HTTP.
		up.scheme = ""
	}
	var err error
	up.caFile = h.CAFile
	if up.tls, err = tlsConfig(h.SkipVerify, h.CAFile); err != nil {
		return nil, fmt.Errorf("registry.hosts[%q]: %w", domain, err)
	}
	return append(out, up), nil
}

func tlsConfig(skipVerify bool, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: skipVerify} // an explicit hosts setting
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// epTransport is an endpoint's HTTP transport: its TLS settings, its scheme
// enforced (a request in the other scheme fails at once, so the library's
// https-then-http probing of loopback hosts cannot downgrade an https
// endpoint), a bound on every request, and a cap on manifest bodies.
type epTransport struct {
	ep          *endpoint
	base        http.RoundTripper
	timeout     time.Duration
	maxManifest int64
}

var (
	baseTransportsMu sync.Mutex
	baseTransports   = map[string]*http.Transport{}
)

// baseTransport keeps one http.Transport (and its idle connections) per
// endpoint TLS setting, across pulls.
func baseTransport(ep *endpoint, timeout time.Duration) *http.Transport {
	// A CA file is keyed by its path and modification time: a changed
	// file gets a new transport.
	var mtime time.Time
	if ep.caFile != "" {
		if fi, err := os.Stat(ep.caFile); err == nil {
			mtime = fi.ModTime()
		}
	}
	key := fmt.Sprintf("%s|%v|%s|%d|%s", ep.host, ep.tls.InsecureSkipVerify, ep.caFile, mtime.UnixNano(), timeout)
	baseTransportsMu.Lock()
	defer baseTransportsMu.Unlock()
	if t, ok := baseTransports[key]; ok {
		return t
	}
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       ep.tls.Clone(),
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: 2 * timeout, // epTransport times out first, with a better message
		ExpectContinueTimeout: time.Second,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	baseTransports[key] = t
	return t
}

// errStalled is the cause of a request cancelled by its timeout.
var errStalled = errors.New("request timed out")

func (t *epTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == t.ep.host {
		switch {
		case t.ep.scheme == "https" && req.URL.Scheme != "https":
			return nil, fmt.Errorf("plain HTTP to %s is not allowed (only loopback registries and endpoints configured as http:// may use it)", t.ep.host)
		case t.ep.scheme == "http" && req.URL.Scheme != "http":
			return nil, fmt.Errorf("%s is configured as plain HTTP (http://)", t.ep.host)
		}
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(t.timeout, func() {
		cancel(fmt.Errorf("%s %s: no response for %s: %w", req.Method, req.URL.Redacted(), t.timeout, errStalled))
	})
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		timer.Stop()
		if c := context.Cause(ctx); c != nil && errors.Is(c, errStalled) {
			err = c
		}
		cancel(nil)
		return nil, err
	}
	var limit int64 = -1
	if strings.Contains(req.URL.Path, "/manifests/") {
		limit = t.maxManifest
		if resp.ContentLength > limit {
			resp.Body.Close()
			timer.Stop()
			cancel(nil)
			return nil, fmt.Errorf("manifest %s is %d bytes, more than the %d allowed", req.URL.Redacted(), resp.ContentLength, limit)
		}
	}
	timer.Reset(t.timeout)
	resp.Body = &watchedBody{rc: resp.Body, ctx: ctx, cancel: cancel, timer: timer, timeout: t.timeout, limit: limit, what: req.URL.Redacted()}
	return resp, nil
}

// watchedBody re-arms the request's timer on every read, so a download
// that keeps moving may take as long as it needs and one that stops fails
// after the timeout; and it fails a body over its limit.
type watchedBody struct {
	rc      io.ReadCloser
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	timeout time.Duration
	limit   int64
	n       int64
	what    string
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.timer.Reset(b.timeout)
	b.n += int64(n)
	if b.limit >= 0 && b.n > b.limit {
		return n, fmt.Errorf("manifest %s is larger than the %d bytes allowed", b.what, b.limit)
	}
	if err != nil && err != io.EOF {
		if c := context.Cause(b.ctx); c != nil && errors.Is(c, errStalled) {
			return n, fmt.Errorf("%s: no data for %s: %w", b.what, b.timeout, errStalled)
		}
	}
	return n, err
}

func (b *watchedBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

// Credentials are registry credentials as the CRI's AuthConfig carries
// them.
type Credentials struct {
	Username, Password string
	// Auth is base64("username:password").
	Auth string
	// ServerAddress limits the credentials to one registry host; "" = any
	// host this pull goes to (as containerd 1.6 uses a request's auth).
	ServerAddress string
	IdentityToken string
	RegistryToken string
}

func (c *Credentials) empty() bool {
	return c == nil || (c.Username == "" && c.Password == "" && c.Auth == "" && c.IdentityToken == "" && c.RegistryToken == "")
}

func (c *Credentials) authConfig() (authn.AuthConfig, error) {
	a := authn.AuthConfig{Username: c.Username, Password: c.Password, IdentityToken: c.IdentityToken, RegistryToken: c.RegistryToken}
	if c.Auth != "" && a.Username == "" {
		u, p, err := decodeAuth(c.Auth)
		if err != nil {
			return a, err
		}
		a.Username, a.Password = u, p
	}
	return a, nil
}

func decodeAuth(s string) (string, string, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", "", fmt.Errorf("auth: not base64: %w", err)
	}
	u, p, ok := strings.Cut(string(raw), ":")
	if !ok {
		return "", "", errors.New("auth: not base64 of username:password")
	}
	return u, p, nil
}

// hostKey normalizes a registry address as written in a docker
// config.json or a CRI ServerAddress ("https://index.docker.io/v1/" →
// "docker.io").
func hostKey(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	s, _, _ = strings.Cut(s, "/")
	switch s {
	case "index.docker.io", "registry-1.docker.io":
		return DefaultDomain
	}
	return s
}

// keychain gives each host the credentials meant for it: the request's,
// then the docker config.json's; anonymous otherwise (the library follows
// Bearer challenges itself, with or without credentials).
type keychain struct {
	// domain is the image's registry and upstream the host its server
	// answers at ("docker.io" at "registry-1.docker.io", or a server
	// configured for it): credentials written for the registry are the
	// server's too.
	domain, upstream string
	cri              *Credentials
	docker           map[string]authn.AuthConfig
}

func (k *keychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	host := hostKey(res.RegistryStr())
	names := []string{host}
	if res.RegistryStr() == k.upstream || host == hostKey(k.upstream) {
		names = append(names, k.domain)
	}
	if !k.cri.empty() && (k.cri.ServerAddress == "" || slices.Contains(names, hostKey(k.cri.ServerAddress))) {
		a, err := k.cri.authConfig()
		if err != nil {
			return nil, err
		}
		return authn.FromConfig(a), nil
	}
	for _, n := range names {
		if a, ok := k.docker[n]; ok {
			return authn.FromConfig(a), nil
		}
	}
	return authn.Anonymous, nil
}

// readDockerConfig reads the "auths" of a docker config.json.
func readDockerConfig(path string) (map[string]authn.AuthConfig, error) {
	if path == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("registry.dockerConfig: %w", err)
	}
	var f struct {
		Auths map[string]authn.AuthConfig `json:"auths"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("registry.dockerConfig %s: %w", path, err)
	}
	out := map[string]authn.AuthConfig{}
	for k, v := range f.Auths {
		out[hostKey(k)] = v
	}
	return out, nil
}

func (c *RegistryConfig) dockerConfigPath() string {
	if c == nil {
		return ""
	}
	return c.DockerConfig
}
