// Package kubeapi reads from a kube-apiserver what podlab trace --pod
// shows beside the spans: a Pod (its conditions, its containers' states),
// its events, and the controllers that made it. It is a client of the apiserver, as the kubelet is,
// with a kubeconfig's credentials (a client certificate or a bearer
// token): two GETs over HTTPS, decoded into k8s.io/api types, need no
// client-go.
package kubeapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/podlab/podlab/internal/otlp"
)

// kubeconfig is the part of a kubeconfig (clientcmd's v1 Config) a
// client needs: the current context's cluster and user.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			TLSServerName            string `json:"tls-server-name"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			ClientCertificate     string `json:"client-certificate"`
			ClientCertificateData string `json:"client-certificate-data"`
			ClientKey             string `json:"client-key"`
			ClientKeyData         string `json:"client-key-data"`
			Token                 string `json:"token"`
			TokenFile             string `json:"tokenFile"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

// Client reads pods and events from one apiserver.
type Client struct {
	server string
	token  string
	http   *http.Client
}

// New is a client for the current context of the kubeconfig at path.
func New(path string) (*Client, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	// Relative file names in a kubeconfig are relative to it.
	file := func(name string) string {
		if name == "" || filepath.IsAbs(name) {
			return name
		}
		return filepath.Join(dir, name)
	}
	ctxName := kc.CurrentContext
	var clusterName, userName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == ctxName {
			clusterName, userName, found = c.Context.Cluster, c.Context.User, true
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeconfig %s: current-context %q: no such context", path, ctxName)
	}
	c := &Client{}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	found = false
	for _, cl := range kc.Clusters {
		if cl.Name != clusterName {
			continue
		}
		found = true
		c.server = strings.TrimSuffix(cl.Cluster.Server, "/")
		tlsConf.ServerName = cl.Cluster.TLSServerName
		tlsConf.InsecureSkipVerify = cl.Cluster.InsecureSkipTLSVerify
		ca, err := pemOf(cl.Cluster.CertificateAuthorityData, file(cl.Cluster.CertificateAuthority))
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: cluster %q: certificate-authority: %w", path, clusterName, err)
		}
		if ca != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return nil, fmt.Errorf("kubeconfig %s: cluster %q: certificate-authority: no PEM certificate", path, clusterName)
			}
			tlsConf.RootCAs = pool
		}
	}
	if !found || c.server == "" {
		return nil, fmt.Errorf("kubeconfig %s: cluster %q: no server", path, clusterName)
	}
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		cert, err := pemOf(u.User.ClientCertificateData, file(u.User.ClientCertificate))
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: user %q: client-certificate: %w", path, userName, err)
		}
		key, err := pemOf(u.User.ClientKeyData, file(u.User.ClientKey))
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: user %q: client-key: %w", path, userName, err)
		}
		if cert != nil || key != nil {
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: user %q: client certificate: %w", path, userName, err)
			}
			tlsConf.Certificates = []tls.Certificate{pair}
		}
		c.token = u.User.Token
		if c.token == "" && u.User.TokenFile != "" {
			t, err := os.ReadFile(file(u.User.TokenFile))
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: user %q: tokenFile: %w", path, userName, err)
			}
			c.token = strings.TrimSpace(string(t))
		}
	}
	c.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf, Proxy: nil}}
	return c, nil
}

// pemOf is base64 data if set, else the file's content, else nil.
func pemOf(data, file string) ([]byte, error) {
	if data != "" {
		return base64.StdEncoding.DecodeString(data)
	}
	if file != "" {
		return os.ReadFile(file)
	}
	return nil, nil
}

// ErrNotFound: the apiserver has no such pod.
var ErrNotFound = errors.New("not found")

// get decodes the JSON the apiserver answers to GET path?query into v.
func (c *Client) get(ctx context.Context, path string, query url.Values, v any) error {
	u := c.server + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "podlab-trace")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("GET %s: %w", path, ErrNotFound)
	}
	if resp.StatusCode != http.StatusOK {
		var st struct{ Message string }
		json.Unmarshal(body, &st)
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, st.Message)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// Pod is the pod namespace/name.
func (c *Client) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := c.get(ctx, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), nil, &pod)
	if err != nil {
		return nil, err
	}
	return &pod, nil
}

// Events are the events about pod (its uid: not those of an earlier pod
// of the same name).
func (c *Client) Events(ctx context.Context, pod *corev1.Pod) ([]corev1.Event, error) {
	var list corev1.EventList
	q := url.Values{"fieldSelector": {"involvedObject.uid=" + string(pod.UID)}}
	if err := c.get(ctx, "/api/v1/namespaces/"+url.PathEscape(pod.Namespace)+"/events", q, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// controllers are the kinds of controller that own pods, by kind: their
// API group's path and resource. A chain of controller ownerReferences
// goes through them (a Deployment's ReplicaSet, a CronJob's Job).
var controllers = map[string]struct{ api, resource string }{
	"ReplicaSet":            {"/apis/apps/v1", "replicasets"},
	"Deployment":            {"/apis/apps/v1", "deployments"},
	"StatefulSet":           {"/apis/apps/v1", "statefulsets"},
	"DaemonSet":             {"/apis/apps/v1", "daemonsets"},
	"ReplicationController": {"/api/v1", "replicationcontrollers"},
	"Job":                   {"/apis/batch/v1", "jobs"},
	"CronJob":               {"/apis/batch/v1", "cronjobs"},
}

// Owners are the objects that made pod, its controller first, then that
// one's, following controller ownerReferences through the kinds of
// controllers. Empty: the pod has no controller. A controller deleted
// since, or of another kind, ends the chain.
func (c *Client) Owners(ctx context.Context, pod *corev1.Pod) ([]otlp.Owner, error) {
	owners := []otlp.Owner{}
	refs := pod.OwnerReferences
	for range 8 { // a chain, not a loop
		ref := metav1.GetControllerOfNoCopy(&metav1.ObjectMeta{OwnerReferences: refs})
		if ref == nil {
			break
		}
		kind, ok := controllers[ref.Kind]
		if !ok {
			break
		}
		owners = append(owners, otlp.Owner{Resource: kind.resource, Name: ref.Name})
		var obj metav1.PartialObjectMetadata
		path := kind.api + "/namespaces/" + url.PathEscape(pod.Namespace) + "/" + kind.resource + "/" + url.PathEscape(ref.Name)
		err := c.get(ctx, path, nil, &obj)
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		refs = obj.OwnerReferences
	}
	return owners, nil
}
