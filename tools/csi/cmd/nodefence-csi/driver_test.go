package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// serveDriver serves d's Identity and the given service on a socket in dir, as main does.
func serveDriver(t *testing.T, d *driver, mode, socket string) {
	t.Helper()
	s := grpc.NewServer(grpc.UnaryInterceptor(d.logCall))
	csi.RegisterIdentityServer(s, d)
	if mode == "controller" {
		csi.RegisterControllerServer(s, d)
	} else {
		csi.RegisterNodeServer(s, d)
	}
	if err := serve(s, socket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
}

// TestSanity runs the csi-test sanity suite (what Kubernetes asks every CSI driver to pass)
// against the controller and a node plugin sharing one state directory.
func TestSanity(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	controller, err := newDriver(state, "")
	if err != nil {
		t.Fatal(err)
	}
	node, err := newDriver(state, "sanity-node")
	if err != nil {
		t.Fatal(err)
	}
	serveDriver(t, controller, "controller", filepath.Join(dir, "controller.sock"))
	serveDriver(t, node, "node", filepath.Join(dir, "node.sock"))

	config := sanity.NewTestConfig()
	config.Address = "unix://" + filepath.Join(dir, "node.sock")
	config.ControllerAddress = "unix://" + filepath.Join(dir, "controller.sock")
	config.TargetPath = filepath.Join(dir, "target")
	config.StagingPath = filepath.Join(dir, "staging")
	config.IdempotentCount = 3
	// The one spec the driver fails on purpose: it attaches to any node ID, as the tests' kwok
	// nodes (no node plugin, so unknown to any node registry) need; sanity wants NOT_FOUND.
	if err := flag.Set("ginkgo.skip", "should fail when the node does not exist"); err != nil {
		t.Fatal(err)
	}
	sanity.Test(t, config)
}

func mountCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	if contains != "" && !strings.Contains(status.Convert(err).Message(), contains) {
		t.Fatalf("message %q does not name %q", status.Convert(err).Message(), contains)
	}
}

// TestSingleAttach: a volume attached to one node cannot be attached to another, nor staged
// there, until it is detached from the first, as a single-attach disk behaves.
func TestSingleAttach(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	ctrl, _ := newDriver(state, "")
	nodeA, _ := newDriver(state, "node-a")
	nodeB, _ := newDriver(state, "node-b")
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mountCapability()},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	publish := func(node string) error {
		_, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
			VolumeId: id, NodeId: node, VolumeCapability: mountCapability(),
		})
		return err
	}
	stage := func(n *driver) error {
		_, err := n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
			VolumeId: id, StagingTargetPath: filepath.Join(dir, n.nodeID, "staging"), VolumeCapability: mountCapability(),
		})
		return err
	}

	wantCode(t, stage(nodeA), codes.FailedPrecondition, "not attached")
	if err := publish("node-a"); err != nil {
		t.Fatal(err)
	}
	if err := publish("node-a"); err != nil {
		t.Fatalf("publishing to the same node again: %v", err)
	}
	wantCode(t, publish("node-b"), codes.FailedPrecondition, "node-a")
	wantCode(t, stage(nodeB), codes.FailedPrecondition, "node-a")
	_, err = ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, err, codes.FailedPrecondition, "node-a")

	// Unpublishing from a node the volume is not attached to changes nothing.
	if _, err := ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-b"}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, publish("node-b"), codes.FailedPrecondition, "node-a")

	// The detach from node-a (the force-detach of a dead node) frees the volume for node-b.
	for range 2 {
		if _, err := ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-a"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := publish("node-b"); err != nil {
		t.Fatalf("publishing to node-b after the detach from node-a: %v", err)
	}
	wantCode(t, stage(nodeA), codes.FailedPrecondition, "node-b")
	if os.Geteuid() == 0 {
		if err := stage(nodeB); err != nil {
			t.Fatal(err)
		}
		staging := filepath.Join(dir, "node-b", "staging")
		if err := os.WriteFile(filepath.Join(staging, "data"), []byte("kept"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := nodeB.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			t.Fatal(err)
		}
		if data, err := os.ReadFile(filepath.Join(ctrl.volumeDir(id), "data")); err != nil || string(data) != "kept" {
			t.Fatalf("the volume's data: %q, %v", data, err)
		}
	}

	// Same name, other capacity: ALREADY_EXISTS; same request: the same volume.
	_, err = ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mountCapability()},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30},
	})
	wantCode(t, err, codes.AlreadyExists, "")
}

// TestRegistration: the kubelet's view of the plugin-registration socket.
func TestRegistration(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "reg.sock")
	s := grpc.NewServer()
	registerapi.RegisterRegistrationServer(s, &registration{csiSocket: "/var/lib/kubelet/plugins/csi.sock"})
	if err := serve(s, socket); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	info, err := client.GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != DriverName || info.Endpoint != "/var/lib/kubelet/plugins/csi.sock" ||
		len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
		t.Fatalf("GetInfo: %+v", info)
	}
	if _, err := client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
}
