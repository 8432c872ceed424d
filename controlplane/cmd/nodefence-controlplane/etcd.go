package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	etcdversion "go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"
)

func etcdVersion() string { return etcdversion.Version }

// runEtcd runs a single-member etcd in this process (go.etcd.io/etcd/server/v3/embed), as
// k8s.io/apiserver's own storage tests do. It prints one line "etcd: ready, client URLs: ..."
// on standard output once it serves, with the real ports when a URL asked for port 0.
func runEtcd() int {
	flags := pflag.NewFlagSet(os.Args[0], pflag.ContinueOnError)
	dataDir := flags.String("data-dir", "", "directory of the member's data (required)")
	name := flags.String("name", "default", "member name")
	listenClient := flags.String("listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve clients on; port 0 picks a free port")
	advertiseClient := flags.String("advertise-client-urls", "", "comma-separated client URLs to advertise (default: --listen-client-urls)")
	listenPeer := flags.String("listen-peer-urls", "http://127.0.0.1:0", "comma-separated peer URLs; port 0 picks a free port (a single member has no peers)")
	noFsync := flags.Bool("unsafe-no-fsync", false, "skip fsync: fast, and loses data on a crash; for tests only")
	logLevel := flags.String("log-level", "warn", "debug, info, warn, error, panic or fatal")
	quota := flags.Int64("quota-backend-bytes", 0, "backend size quota in bytes (0: etcd's default)")
	if err := flags.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}
	if *advertiseClient == "" {
		*advertiseClient = *listenClient
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dataDir
	cfg.UnsafeNoFsync = *noFsync
	cfg.LogLevel = *logLevel
	cfg.QuotaBackendBytes = *quota
	var err error
	if cfg.ListenClientUrls, err = parseURLs(*listenClient); err != nil {
		return fail(err)
	}
	if cfg.AdvertiseClientUrls, err = parseURLs(*advertiseClient); err != nil {
		return fail(err)
	}
	if cfg.ListenPeerUrls, err = parseURLs(*listenPeer); err != nil {
		return fail(err)
	}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fail(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fail(err)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		return fail(fmt.Errorf("not ready after 60s"))
	}
	urls := make([]string, 0, len(e.Clients))
	for _, l := range e.Clients {
		urls = append(urls, "http://"+l.Addr().String())
	}
	fmt.Printf("etcd: ready, client URLs: %s\n", strings.Join(urls, ","))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-stop:
		return 0
	case err := <-e.Err():
		return fail(err)
	}
}

func parseURLs(list string) ([]url.URL, error) {
	var urls []url.URL
	for _, s := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		urls = append(urls, *u)
	}
	return urls, nil
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
	return 1
}
