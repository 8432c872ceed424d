package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{
			Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		}},
	}}}, nil
}

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.nodeID}, nil
}

// NodeStageVolume makes the volume visible on this node, as a disk's device would be: only when
// the controller attached it here. Staging is a bind mount of the shared directory.
func (d *driver) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	att, err := d.attachmentOf(id)
	if err != nil {
		return nil, err
	}
	if att == nil || att.NodeID != d.nodeID {
		where := "not attached to any node"
		if att != nil {
			where = "attached to node " + att.NodeID
		}
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is %s, not to this node %s", id, where, d.nodeID)
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, internal(err)
	}
	mounted, err := isMountPoint(staging)
	if err != nil {
		return nil, internal(err)
	}
	if mounted {
		return &csi.NodeStageVolumeResponse{}, nil
	}
	if err := unix.Mount(d.volumeDir(id), staging, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind-mount %s on %s: %v", d.volumeDir(id), staging, err)
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (d *driver) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := unmountIfMounted(req.GetStagingTargetPath()); err != nil {
		return nil, internal(err)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path missing (the driver stages volumes)")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	staged, err := isMountPoint(staging)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, internal(err)
	}
	if !staged {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", id, staging)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, internal(err)
	}
	mounted, err := isMountPoint(target)
	if err != nil {
		return nil, internal(err)
	}
	if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := unix.Mount(staging, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind-mount %s on %s: %v", staging, target, err)
	}
	// A bind mount ignores MS_RDONLY on creation; read-only takes a remount of the bind.
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "remount %s read-only: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts the target and removes it, as the CSI spec asks of the plugin
// that created it.
func (d *driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := unmountIfMounted(target); err != nil {
		return nil, internal(err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, internal(err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func unmountIfMounted(path string) error {
	mounted, err := isMountPoint(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !mounted {
		return nil
	}
	if err := unix.Unmount(path, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

// isMountPoint reads /proc/self/mountinfo (a bind mount of a directory on the same filesystem
// has the same device as its parent, so comparing devices would not tell).
func isMountPoint(path string) (bool, error) {
	if _, err := os.Stat(path); err != nil {
		return false, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		abs = resolved
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// Fields: ID, parent ID, major:minor, root, mount point, ...
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && unescapeMountinfo(fields[4]) == abs {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space, etc.).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
