// Command tlsprobe is a tiny static TLS server and client for podlab's CA
// injection tests: `serve` answers HTTPS with a given certificate; `get`
// fetches a URL trusting only the system roots, which Go reads from
// SSL_CERT_FILE or the standard bundle paths, the files podlab injects.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tlsprobe serve -cert C -key K [-addr :8443] | tlsprobe get [-servername N] URL")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ExitOnError)
		cert := fs.String("cert", "", "certificate (PEM)")
		key := fs.String("key", "", "private key (PEM)")
		addr := fs.String("addr", ":8443", "listen address")
		fs.Parse(os.Args[2:])
		host, _ := os.Hostname()
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "ok from %s\n", host) })
		fmt.Println("serving on", *addr)
		srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 5 * time.Second}
		if err := srv.ListenAndServeTLS(*cert, *key); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "get":
		fs := flag.NewFlagSet("get", flag.ExitOnError)
		serverName := fs.String("servername", "", "TLS server name to verify (default: the URL's host)")
		retries := fs.Int("retries", 50, "connection attempts, 100ms apart (the server may still be starting)")
		fs.Parse(os.Args[2:])
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: *serverName}}}
		var err error
		for i := 0; i < *retries; i++ {
			var resp *http.Response
			resp, err = client.Get(fs.Arg(0))
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				fmt.Printf("%s %s", resp.Status, body)
				return
			}
			if _, ok := err.(interface{ Timeout() bool }); !ok && isTLSError(err) {
				break // a certificate error will not go away
			}
			time.Sleep(100 * time.Millisecond)
		}
		fmt.Fprintln(os.Stderr, "get:", err)
		os.Exit(1)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func isTLSError(err error) bool {
	s := err.Error()
	for _, m := range []string{"x509:", "tls:", "certificate"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}
