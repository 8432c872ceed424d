// Command pause is the pod sandbox's process for the real nodes of nodefence's tests, and the
// first process of each node's PID namespace: it holds the namespaces open, reaps every child
// the kernel hands it, and exits on SIGINT or SIGTERM, as the registry's pause image does. It
// is built static (CGO_ENABLED=0) so that an image of this one file runs anywhere.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
