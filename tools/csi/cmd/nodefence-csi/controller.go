package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// driver is both the controller and the node plugin; which services a process serves is chosen
// in main. All state is in files under stateDir, shared by every node plugin and the controller:
//
//	volumes/<id>/       the volume's data (bind-mounted into pods)
//	volumes/<id>.json   the volume's name and capacity (written last: the volume exists once it is there)
//	attachments/<id>    the node the volume is attached to (JSON), written by ControllerPublishVolume
//
// The storage attaches a volume to whichever node ID it is asked for, as a SAN without host
// lists would: the tests' kwok nodes have no node plugin, yet their pods' volumes attach.
type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	stateDir string
	nodeID   string // node mode only
	// mu serialises every read-modify-write of the state in this process; the files are written
	// atomically (temp file + rename) so that another process never reads half a record.
	mu sync.Mutex
}

type volumeRecord struct {
	Name          string `json:"name"`
	CapacityBytes int64  `json:"capacity_bytes"`
}

type attachmentRecord struct {
	NodeID     string    `json:"node_id"`
	AttachedAt time.Time `json:"attached_at"`
}

func newDriver(stateDir, nodeID string) (*driver, error) {
	for _, sub := range []string{"volumes", "attachments"} {
		if err := os.MkdirAll(filepath.Join(stateDir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	return &driver{stateDir: stateDir, nodeID: nodeID}, nil
}

// volumeID derives the ID from the name, which makes CreateVolume idempotent by name without a
// lookup table: a retried CreateVolume finds the volume it made before.
func volumeID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "hostdir-" + hex.EncodeToString(sum[:])[:20]
}

// safeName reports whether an ID can name a file in the state directory; anything else names a
// volume that cannot exist.
func safeName(id string) bool {
	return id != "" && id != "." && id != ".." && filepath.Base(id) == id && len(id) <= 255
}

// volumeDir is the volume's data, volumeMeta its record, attachment its attachment record.
func (d *driver) volumeDir(id string) string {
	return filepath.Join(d.stateDir, "volumes", id)
}

func (d *driver) volumeMeta(id string) string {
	return filepath.Join(d.stateDir, "volumes", id+".json")
}

func (d *driver) attachment(id string) string {
	return filepath.Join(d.stateDir, "attachments", id)
}

// writeJSON writes a record atomically: a reader sees the old file or the new one, never half.
func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readJSON returns found=false when the file does not exist.
func readJSON(path string, v any) (found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, json.Unmarshal(data, v)
}

func (d *driver) readVolume(id string) (*volumeRecord, error) {
	if !safeName(id) {
		return nil, nil
	}
	var v volumeRecord
	found, err := readJSON(d.volumeMeta(id), &v)
	if err != nil || !found {
		return nil, err
	}
	return &v, nil
}

func (d *driver) readAttachment(id string) (*attachmentRecord, error) {
	if !safeName(id) {
		return nil, nil
	}
	var a attachmentRecord
	found, err := readJSON(d.attachment(id), &a)
	if err != nil || !found {
		return nil, err
	}
	return &a, nil
}

// attachmentOf is the attachment of a volume that must exist (nil while it is attached
// nowhere), failing as gRPC statuses: NotFound for an unknown volume. The caller holds d.mu.
func (d *driver) attachmentOf(id string) (*attachmentRecord, error) {
	vol, err := d.readVolume(id)
	if err != nil {
		return nil, internal(err)
	}
	if vol == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	att, err := d.readAttachment(id)
	if err != nil {
		return nil, internal(err)
	}
	return att, nil
}

func internal(err error) error { return status.Error(codes.Internal, err.Error()) }

// --- Identity ---

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: DriverName, VendorVersion: DriverVersion}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
		}},
	}}}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// --- Controller ---

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}},
		})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkCapability accepts what a single-attach disk with a filesystem offers: a mount on one node.
func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return errors.New("volume capability missing")
	}
	if c.GetMount() == nil {
		return errors.New("only the mount access type is supported (no raw block)")
	}
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return nil
	}
	return fmt.Errorf("access mode %s not supported: the volume attaches to one node", c.GetAccessMode().GetMode())
}

func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return errors.New("volume capabilities missing")
	}
	for _, c := range caps {
		if err := checkCapability(c); err != nil {
			return err
		}
	}
	return nil
}

func (d *driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported")
	}
	required, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if required < 0 || limit < 0 || (limit > 0 && required > limit) {
		return nil, status.Errorf(codes.OutOfRange, "capacity range required=%d limit=%d cannot be met", required, limit)
	}
	// A directory has no size of its own; the volume reports what was asked for (0: unknown).
	capacity := required
	id := volumeID(req.GetName())

	d.mu.Lock()
	defer d.mu.Unlock()
	existing, err := d.readVolume(id)
	if err != nil {
		return nil, internal(err)
	}
	if existing != nil {
		if existing.Name != req.GetName() || existing.CapacityBytes != capacity {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s (name %q) exists with capacity %d, not %d",
				id, existing.Name, existing.CapacityBytes, capacity)
		}
		return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: capacity}}, nil
	}
	if err := os.MkdirAll(d.volumeDir(id), 0o777); err != nil {
		return nil, internal(err)
	}
	// World-writable like an empty filesystem a pod's non-root user must be able to write to.
	if err := os.Chmod(d.volumeDir(id), 0o777); err != nil {
		return nil, internal(err)
	}
	if err := writeJSON(d.volumeMeta(id), volumeRecord{Name: req.GetName(), CapacityBytes: capacity}); err != nil {
		return nil, internal(err)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: capacity}}, nil
}

func (d *driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	vol, err := d.readVolume(id)
	if err != nil {
		return nil, internal(err)
	}
	if vol == nil {
		return &csi.DeleteVolumeResponse{}, nil
	}
	att, err := d.readAttachment(id)
	if err != nil {
		return nil, internal(err)
	}
	if att != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is attached to node %s", id, att.NodeID)
	}
	// The data first, the record last: a failed removal is retried, as the volume still exists.
	if err := os.RemoveAll(d.volumeDir(id)); err != nil {
		return nil, internal(err)
	}
	if err := os.Remove(d.volumeMeta(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, internal(err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if node == "" {
		return nil, status.Error(codes.InvalidArgument, "node ID missing")
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
	if att != nil {
		if att.NodeID == node {
			return &csi.ControllerPublishVolumeResponse{}, nil
		}
		// A single-attach disk: the other node must be detached first (ControllerUnpublishVolume,
		// which the out-of-service taint's force-detach brings about when that node is dead).
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is attached to node %s; it attaches to one node at a time", id, att.NodeID)
	}
	if err := writeJSON(d.attachment(id), attachmentRecord{NodeID: node, AttachedAt: time.Now().UTC()}); err != nil {
		return nil, internal(err)
	}
	return &csi.ControllerPublishVolumeResponse{}, nil
}

func (d *driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	att, err := d.readAttachment(id)
	if err != nil {
		return nil, internal(err)
	}
	// Not attached, or attached elsewhere: the volume is already unpublished from this node.
	// An empty node ID means every node (CSI spec).
	if att == nil || (node != "" && att.NodeID != node) {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err := os.Remove(d.attachment(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, internal(err)
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (d *driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	vol, err := d.readVolume(req.GetVolumeId())
	if err != nil {
		return nil, internal(err)
	}
	if vol == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}
