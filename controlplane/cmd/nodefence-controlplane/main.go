// Command nodefence-controlplane is one binary holding a real Kubernetes control plane for
// nodefence's tests: kube-apiserver, kube-controller-manager and kube-scheduler of one
// Kubernetes release, an embedded etcd, kwok standing in for the kubelets, and the same
// release's kubelet and kube-proxy for the nodes that run real containers.
//
//	nodefence-controlplane apiserver|controller-manager|scheduler|etcd|kwok|kubelet|proxy [flags...]
//
// Each subcommand is the upstream command with its own flags; the first argument only picks
// which one runs. One binary instead of five means one link of the large Kubernetes graph.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	_ "time/tzdata" // CronJob time zones, as the upstream binaries embed them

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/component-base/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var subcommands = map[string]func() int{
	"apiserver": func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"controller-manager": func() int {
		return cli.Run(controllermanager.NewControllerManagerCommand())
	},
	"scheduler": func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":   func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"proxy":     func() int { return cli.Run(proxy.NewProxyCommand()) },
	"etcd":      runEtcd,
	"kwok":      runKwok,
	"version":   printVersion,
}

// aliases lets the upstream binary names work too.
var aliases = map[string]string{
	"kube-apiserver":          "apiserver",
	"kube-controller-manager": "controller-manager",
	"kube-scheduler":          "scheduler",
	"kube-proxy":              "proxy",
}

func usage() {
	names := make([]string, 0, len(subcommands))
	for name := range subcommands {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: %s %s [flags...]\n", os.Args[0], strings.Join(names, "|"))
	fmt.Fprintf(os.Stderr, "       %s SUBCOMMAND --help for the subcommand's flags\n", os.Args[0])
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if alias, ok := aliases[name]; ok {
		name = alias
	}
	run, ok := subcommands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: unknown subcommand %q\n", os.Args[0], os.Args[1])
		usage()
		os.Exit(2)
	}
	// The upstream commands read their flags from os.Args[1:] (kwok parses os.Args itself,
	// before cobra), so the subcommand's name is taken out of the argument list.
	os.Args = append([]string{os.Args[0] + " " + name}, os.Args[2:]...)
	os.Exit(run())
}

func printVersion() int {
	info := version.Get()
	fmt.Printf("kubernetes %s (%s)\netcd %s\nkwok %s\n", info.GitVersion, info.GoVersion, etcdVersion(), kwokVersion())
	return 0
}
