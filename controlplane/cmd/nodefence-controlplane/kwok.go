package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeatwithlease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/consts"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

func kwokVersion() string { return consts.Version }

// defaultStages are the stages kwokctl gives its kwok by default: a node comes up Ready and
// keeps its Lease renewed; a pod becomes Running, completes when its containers would, and is
// deleted once it has a deletionTimestamp (as a kubelet confirms a graceful delete).
var defaultStages = []string{
	nodefast.DefaultNodeInit,
	nodeheartbeatwithlease.DefaultNodeHeartbeatWithLease,
	podfast.DefaultPodReady,
	podfast.DefaultPodComplete,
	podfast.DefaultPodDelete,
}

// runKwok is sigs.k8s.io/kwok/cmd/kwok's main. Without a -c/--config of its own it is given
// the default stages, written to a file in the temp directory.
func runKwok() int {
	// cobra adds pflag.CommandLine to every root command. In this binary it holds the
	// Kubernetes commands' --version (k8s.io/component-base/version/verflag), which breaks
	// kwok's own --version; kwok's binary has none there, so kwok gets an empty one.
	pflag.CommandLine = pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)

	if !hasConfigFlag(os.Args[1:]) {
		dir, err := os.MkdirTemp("", "nodefence-kwok-")
		if err != nil {
			os.Stderr.WriteString("kwok: " + err.Error() + "\n")
			return 1
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "stages.yaml")
		if err := os.WriteFile(path, []byte(strings.Join(defaultStages, "\n---\n")), 0o600); err != nil {
			os.Stderr.WriteString("kwok: " + err.Error() + "\n")
			return 1
		}
		os.Args = append([]string{os.Args[0], "--config=" + path}, os.Args[1:]...)
	}

	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := signals.SetupSignalContext()
	ctx, logger := log.InitFlags(ctx, flagset)

	ctx, err := config.InitFlags(ctx, flagset)
	if err != nil {
		_, _ = os.Stderr.Write([]byte(flagset.FlagUsages()))
		logger.Error("Init config flags", "err", err)
		return 1
	}

	command := cmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", "err", err)
		return 1
	}
	return 0
}

func hasConfigFlag(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-c" || a == "--config" || strings.HasPrefix(a, "--config=") || (strings.HasPrefix(a, "-c") && len(a) > 2 && !strings.HasPrefix(a, "--")) {
			return true
		}
	}
	return false
}
