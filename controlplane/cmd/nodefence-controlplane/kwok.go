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

// defaultStages are the stages kwokctl gives its kwok by default, with the node stages'
// condition times made a kubelet's: a node comes up Ready and keeps its Lease renewed; a pod
// becomes Running, completes when its containers would, and is deleted once it has a
// deletionTimestamp (as a kubelet confirms a graceful delete). One stage is the project's own:
// podReadyAgain.
func defaultStages() []string {
	return []string{
		kubeletTimes(nodefast.DefaultNodeInit, initTransition),
		kubeletTimes(nodeheartbeatwithlease.DefaultNodeHeartbeatWithLease, keptTransition),
		podfast.DefaultPodReady,
		podReadyAgain,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
}

// podReadyAgain reports a running pod Ready again once its node's kwok runs. The node lifecycle
// controller sets Ready=False on every pod of a node whose Lease lapsed; a kubelet that comes
// back reports its containers' readiness again, while kwok's stock pod-ready stage matches
// Pending pods only, so without this a pod stays not ready for ever after a short lapse (and a
// Deployment on kwok nodes stays unavailable). Pods of Jobs are left to pod-complete.
const podReadyAgain = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.ownerReferences.[].kind'
      operator: 'NotIn'
      values:
      - 'Job'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values:
      - 'True'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
`

// kwok's stock node stages stamp every condition's lastTransitionTime with the Node's
// creationTimestamp, so a node that comes back would read "Ready since it was registered". A
// kubelet stamps a transition when the status changes: the initialising stage (it runs only
// while Ready is not True) stamps now, and the heartbeat keeps each condition's own time.
const (
	stockTransition = "{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}"
	initTransition  = "{{ $lastTransitionTime := $now }}"
	keptTransition  = "{{ $conditions := .status.conditions }}"
	stockCondition  = "lastTransitionTime: {{ $lastTransitionTime | Quote }}"
	keptCondition   = "lastTransitionTime: {{ $type := .type }}{{ $kept := $now }}" +
		"{{ range $conditions }}{{ if eq .type $type }}{{ $kept = .lastTransitionTime }}{{ end }}{{ end }}" +
		"{{ $kept | Quote }}"
)

// kubeletTimes rewrites a stock node stage's transition time; it panics when the stage no
// longer has the text it rewrites, so an upgraded kwok cannot silently bring the old times back.
func kubeletTimes(stage, transition string) string {
	if strings.Count(stage, stockTransition) != 1 || strings.Count(stage, stockCondition) != 1 {
		panic("kwok's node stage changed; kubeletTimes no longer applies")
	}
	stage = strings.Replace(stage, stockTransition, transition, 1)
	if transition == keptTransition {
		stage = strings.Replace(stage, stockCondition, keptCondition, 1)
	}
	return stage
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
		if err := os.WriteFile(path, []byte(strings.Join(defaultStages(), "\n---\n")), 0o600); err != nil {
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
