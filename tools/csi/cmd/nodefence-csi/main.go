// Command nodefence-csi is the project's own small CSI driver for the real-cluster tests.
//
// A volume's data lives in a host directory that every node of the test machine shares, so a
// pod that moves to another node finds its data, as it would on network storage; but the driver
// behaves like a single-attach disk: ControllerPublishVolume attaches a volume to one node only,
// and NodeStageVolume refuses on any other node. A volume held by a node that died is freed only
// by a detach (the out-of-service taint's force-detach), which is what the tests exercise.
//
//	nodefence-csi controller --endpoint=unix:///path/csi.sock --state-dir=DIR
//	nodefence-csi node --endpoint=unix:///path/csi.sock --state-dir=DIR --node-id=NAME \
//	    --registration-socket=ROOT/plugins_registry/hostdir.csi.nodefence.io-reg.sock
//
// The controller runs beside the external-provisioner and external-attacher (both talk to its
// socket); the node plugin runs in the kubelet's mount namespace and registers itself with that
// kubelet through the plugin-registration socket, as node-driver-registrar would.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// DriverName is the CSI driver's name: the provisioner of the StorageClass, the attacher of the
// VolumeAttachments and the name the kubelet registers the node plugin under.
const DriverName = "hostdir.csi.nodefence.io"

// DriverVersion is reported by GetPluginInfo.
const DriverVersion = "0.1.0"

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  %[1]s controller --endpoint=unix:///path/csi.sock --state-dir=DIR
  %[1]s node --endpoint=unix:///path/csi.sock --state-dir=DIR --node-id=NAME --registration-socket=PATH
`, filepath.Base(os.Args[0]))
	os.Exit(2)
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetOutput(os.Stderr)
	if len(os.Args) < 2 {
		usage()
	}
	mode := os.Args[1]
	if mode != "controller" && mode != "node" {
		usage()
	}
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	endpoint := fs.String("endpoint", "", "the CSI socket, unix:///path/csi.sock")
	stateDir := fs.String("state-dir", "", "the directory every node shares: volumes/ and attachments/")
	nodeID := fs.String("node-id", "", "node mode: this node's ID (the Kubernetes node name)")
	regSocket := fs.String("registration-socket", "", "node mode: the kubelet plugin-registration socket to serve, in the kubelet's plugins_registry/")
	_ = fs.Parse(os.Args[2:])
	if *endpoint == "" || *stateDir == "" || (mode == "node" && (*nodeID == "" || *regSocket == "")) {
		usage()
	}
	csiSocket, err := socketPath(*endpoint)
	if err != nil {
		log.Fatal(err)
	}
	d, err := newDriver(*stateDir, *nodeID)
	if err != nil {
		log.Fatal(err)
	}

	servers := []*grpc.Server{}
	sockets := []string{}
	csiServer := grpc.NewServer(grpc.UnaryInterceptor(d.logCall))
	csi.RegisterIdentityServer(csiServer, d)
	if mode == "controller" {
		csi.RegisterControllerServer(csiServer, d)
	} else {
		csi.RegisterNodeServer(csiServer, d)
	}
	if err := serve(csiServer, csiSocket); err != nil {
		log.Fatal(err)
	}
	servers, sockets = append(servers, csiServer), append(sockets, csiSocket)
	if mode == "node" {
		regServer := grpc.NewServer()
		registerapi.RegisterRegistrationServer(regServer, &registration{csiSocket: csiSocket})
		if err := serve(regServer, *regSocket); err != nil {
			log.Fatal(err)
		}
		servers, sockets = append(servers, regServer), append(sockets, *regSocket)
	}
	log.Printf("%s %s %s serving CSI on %s (state %s, node %q)", DriverName, DriverVersion, mode, csiSocket, *stateDir, *nodeID)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	sig := <-stop
	log.Printf("%s: stopping", sig)
	// Removing the registration socket is what tells the kubelet the plugin is gone.
	for i, s := range servers {
		s.Stop()
		_ = os.Remove(sockets[i])
	}
}

// socketPath accepts unix:///path (as the sidecars' --csi-address does) or a bare absolute path.
func socketPath(endpoint string) (string, error) {
	p := strings.TrimPrefix(endpoint, "unix://")
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("endpoint %q: want unix:///absolute/path", endpoint)
	}
	return p, nil
}

// serve listens on a unix socket, first removing a stale socket file a killed process left
// behind (listen would fail on it), and serves in the background.
func serve(s *grpc.Server, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	go func() {
		if err := s.Serve(l); err != nil {
			log.Printf("serve %s: %v", path, err)
		}
	}()
	return nil
}

// logCall logs every CSI call as one line: method, volume, node, result and duration.
func (d *driver) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	volume, node := "-", "-"
	if r, ok := req.(interface{ GetVolumeId() string }); ok && r.GetVolumeId() != "" {
		volume = r.GetVolumeId()
	}
	if r, ok := req.(interface{ GetName() string }); ok && volume == "-" && r.GetName() != "" {
		volume = "name:" + r.GetName()
	}
	if r, ok := req.(interface{ GetNodeId() string }); ok && r.GetNodeId() != "" {
		node = r.GetNodeId()
	} else if d.nodeID != "" {
		node = d.nodeID
	}
	result := "OK"
	if err != nil {
		st := status.Convert(err)
		result = fmt.Sprintf("%s: %s", st.Code(), st.Message())
	} else if r, ok := resp.(*csi.CreateVolumeResponse); ok {
		result = "OK " + r.GetVolume().GetVolumeId()
	}
	log.Printf("%s volume=%s node=%s result=%q (%s)", info.FullMethod, volume, node, result, time.Since(start).Round(time.Microsecond))
	return resp, err
}

// registration serves the kubelet's plugin-registration API (pluginregistration.v1), the job
// node-driver-registrar does in a cluster: the kubelet finds the socket in its plugins_registry/
// directory, asks GetInfo, then dials the CSI endpoint the answer names.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	csiSocket string
}

func (r *registration) GetInfo(ctx context.Context, req *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	log.Printf("registration GetInfo: %s at %s", DriverName, r.csiSocket)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              DriverName,
		Endpoint:          r.csiSocket,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(ctx context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.PluginRegistered {
		log.Printf("registration: the kubelet registered %s", DriverName)
	} else {
		log.Printf("registration: the kubelet did NOT register %s: %s", DriverName, st.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
