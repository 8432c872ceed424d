"""The ``components.schemas`` of the OpenAPI v3 documents, derived from the protobuf field tables.

``kubectl explain`` renders nothing but these schemas, so they follow the shape the real server
publishes: each Go type under its package path (``io.k8s.api.core.v1.Pod``), references wrapped
in ``allOf`` beside the field's own keys, the wrapper types with their JSON forms (``Time`` a
date-time string, ``IntOrString`` an integer or a string), embedded structs flattened into their
parent, and the list and map annotations structured-merge-diff reads. The list annotations come
from the same facts server-side apply uses (``fieldsets``), so what the documents declare and
what the simulator merges cannot disagree. The tables carry no comments of the Go types, so only
the type meta fields have descriptions.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from functools import cache
from typing import Any

from nodefence_sim import fieldsets
from nodefence_sim.api.proto_schema import (
    DELETE_OPTIONS,
    EXTRA_VALUE,
    FIELDS_V1,
    INT_OR_STRING,
    KINDS,
    MESSAGES,
    MICRO_TIME,
    QUANTITY,
    SCALARS,
    TIME,
    Field,
)
from nodefence_sim.resources import RESOURCE_TYPES, ResourceType

Schema = dict[str, Any]
REF_PREFIX = "#/components/schemas/"

# Go package paths of the tables' proto packages.
_PACKAGES = {
    "meta.v1": "io.k8s.apimachinery.pkg.apis.meta.v1",
    "resource": "io.k8s.apimachinery.pkg.api.resource",
    "intstr": "io.k8s.apimachinery.pkg.util.intstr",
}
# The kinds of the subresources whose bodies are not their parent's kind.
SUBRESOURCE_KINDS: dict[str, tuple[str, str]] = {
    "scale": ("autoscaling/v1", "Scale"),
    "eviction": ("policy/v1", "Eviction"),
    "binding": ("v1", "Binding"),
}
_API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers "
    "should convert recognized schemas to the latest internal value, and may reject "
    "unrecognized values. More info: https://git.k8s.io/community/contributors/devel/"
    "sig-architecture/api-conventions.md#resources"
)
_KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents. Servers may "
    "infer this from the endpoint the client submits requests to. Cannot be updated. In "
    "CamelCase. More info: https://git.k8s.io/community/contributors/devel/"
    "sig-architecture/api-conventions.md#types-kinds"
)
_SCALAR_SCHEMAS: dict[str, Schema] = {
    "string": {"type": "string"},
    "int32": {"type": "integer", "format": "int32"},
    "int64": {"type": "integer", "format": "int64"},
    "bool": {"type": "boolean"},
    "bytes": {"type": "string", "format": "byte"},
}
_ZERO: dict[str, Any] = {"string": "", "int32": 0, "int64": 0, "bool": False}
# The wrapper types as the real documents publish them: their JSON forms, not their fields.
_WRAPPERS: dict[str, Schema] = {
    TIME: {
        "description": (
            "Time is a wrapper around time.Time which supports correct marshaling to YAML and "
            "JSON.  Wrappers are provided for many of the factory methods that the time "
            "package offers."
        ),
        "format": "date-time",
        "type": "string",
    },
    MICRO_TIME: {
        "description": "MicroTime is version of Time with microsecond level precision.",
        "format": "date-time",
        "type": "string",
    },
    QUANTITY: {"oneOf": [{"type": "string"}, {"type": "number"}]},
    INT_OR_STRING: {
        "description": (
            "IntOrString is a type that can hold an int32 or a string.  When used in JSON or "
            "YAML marshalling and unmarshalling, it produces or consumes the inner type.  This "
            "allows you to have, for example, a JSON field that can accept a name or number."
        ),
        "format": "int-or-string",
        "oneOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    },
    FIELDS_V1: {
        "description": (
            "FieldsV1 stores a set of fields in a data structure like a Trie, in JSON format."
        ),
        "type": "object",
    },
}
# ``authorization.v1.ExtraValue`` is a named ``[]string``: published inline, never by name.
_EXTRA_VALUE: Schema = {"items": {"default": "", "type": "string"}, "type": "array"}
# Lists the types merge with ``retainKeys`` besides their merge key.
_RETAIN_KEYS = frozenset({("spec", "volumes")})
# The fields the Go types mark required (``+required`` or a JSON tag without ``omitempty``
# that the OpenAPI generator counts as required), in declaration order.
_REQUIRED: dict[str, tuple[str, ...]] = {
    "meta.v1.OwnerReference": ("kind", "name", "uid", "apiVersion"),
    "meta.v1.LabelSelectorRequirement": ("key", "operator"),
    "meta.v1.FieldSelectorRequirement": ("key", "operator"),
    "meta.v1.Condition": ("type", "status", "lastTransitionTime", "reason", "message"),
    "core.v1.NamespaceCondition": ("type", "status"),
    "core.v1.Taint": ("key", "effect"),
    "core.v1.ConfigMapNodeConfigSource": ("namespace", "name", "kubeletConfigKey"),
    "core.v1.NodeCondition": ("type", "status"),
    "core.v1.NodeAddress": ("type", "address"),
    "core.v1.DaemonEndpoint": ("Port",),
    "core.v1.NodeSystemInfo": (
        "machineID",
        "systemUUID",
        "bootID",
        "kernelVersion",
        "osImage",
        "containerRuntimeVersion",
        "kubeletVersion",
        "kubeProxyVersion",
        "operatingSystem",
        "architecture",
    ),
    "core.v1.AttachedVolume": ("name", "devicePath"),
    "core.v1.PodSpec": ("containers",),
    "core.v1.Volume": ("name",),
    "core.v1.HostPathVolumeSource": ("path",),
    "core.v1.GCEPersistentDiskVolumeSource": ("pdName",),
    "core.v1.AWSElasticBlockStoreVolumeSource": ("volumeID",),
    "core.v1.GitRepoVolumeSource": ("repository",),
    "core.v1.KeyToPath": ("key", "path"),
    "core.v1.NFSVolumeSource": ("server", "path"),
    "core.v1.ISCSIVolumeSource": ("targetPortal", "iqn", "lun"),
    "core.v1.GlusterfsVolumeSource": ("endpoints", "path"),
    "core.v1.PersistentVolumeClaimVolumeSource": ("claimName",),
    "core.v1.RBDVolumeSource": ("monitors", "image"),
    "core.v1.FlexVolumeSource": ("driver",),
    "core.v1.CinderVolumeSource": ("volumeID",),
    "core.v1.CephFSVolumeSource": ("monitors",),
    "core.v1.DownwardAPIVolumeFile": ("path",),
    "core.v1.ObjectFieldSelector": ("fieldPath",),
    "core.v1.ResourceFieldSelector": ("resource",),
    "core.v1.AzureFileVolumeSource": ("secretName", "shareName"),
    "core.v1.VsphereVirtualDiskVolumeSource": ("volumePath",),
    "core.v1.QuobyteVolumeSource": ("registry", "volume"),
    "core.v1.AzureDiskVolumeSource": ("diskName", "diskURI"),
    "core.v1.PhotonPersistentDiskVolumeSource": ("pdID",),
    "core.v1.ServiceAccountTokenProjection": ("path",),
    "core.v1.ClusterTrustBundleProjection": ("path",),
    "core.v1.PortworxVolumeSource": ("volumeID",),
    "core.v1.ScaleIOVolumeSource": ("gateway", "system", "secretRef"),
    "core.v1.CSIVolumeSource": ("driver",),
    "core.v1.PersistentVolumeClaimTemplate": ("spec",),
    "core.v1.TypedLocalObjectReference": ("kind", "name"),
    "core.v1.TypedObjectReference": ("kind", "name"),
    "core.v1.Container": ("name",),
    "core.v1.ContainerPort": ("containerPort",),
    "core.v1.EnvVar": ("name",),
    "core.v1.ConfigMapKeySelector": ("key",),
    "core.v1.SecretKeySelector": ("key",),
    "core.v1.ResourceClaim": ("name",),
    "core.v1.ContainerResizePolicy": ("resourceName", "restartPolicy"),
    "core.v1.VolumeMount": ("name", "mountPath"),
    "core.v1.VolumeDevice": ("name", "devicePath"),
    "core.v1.HTTPGetAction": ("port",),
    "core.v1.HTTPHeader": ("name", "value"),
    "core.v1.TCPSocketAction": ("port",),
    "core.v1.GRPCAction": ("port",),
    "core.v1.SleepAction": ("seconds",),
    "core.v1.SeccompProfile": ("type",),
    "core.v1.AppArmorProfile": ("type",),
    "core.v1.EphemeralContainer": ("name",),
    "core.v1.Sysctl": ("name", "value"),
    "core.v1.NodeSelector": ("nodeSelectorTerms",),
    "core.v1.NodeSelectorRequirement": ("key", "operator"),
    "core.v1.PreferredSchedulingTerm": ("weight", "preference"),
    "core.v1.PodAffinityTerm": ("topologyKey",),
    "core.v1.WeightedPodAffinityTerm": ("weight", "podAffinityTerm"),
    "core.v1.HostAlias": ("ip",),
    "core.v1.PodReadinessGate": ("conditionType",),
    "core.v1.TopologySpreadConstraint": ("maxSkew", "topologyKey", "whenUnsatisfiable"),
    "core.v1.PodOS": ("name",),
    "core.v1.PodSchedulingGate": ("name",),
    "core.v1.PodResourceClaim": ("name",),
    "core.v1.PodCondition": ("type", "status"),
    "core.v1.HostIP": ("ip",),
    "core.v1.PodIP": ("ip",),
    "core.v1.ContainerStatus": ("name", "ready", "restartCount", "image", "imageID"),
    "core.v1.ContainerStateTerminated": ("exitCode",),
    "core.v1.VolumeMountStatus": ("name", "mountPath"),
    "core.v1.LinuxContainerUser": ("uid", "gid"),
    "core.v1.ResourceStatus": ("name",),
    "core.v1.ResourceHealth": ("resourceID",),
    "core.v1.PodResourceClaimStatus": ("name",),
    "core.v1.Event": ("metadata", "involvedObject"),
    "core.v1.PersistentVolumeClaimCondition": ("type", "status"),
    "core.v1.ModifyVolumeStatus": ("status",),
    "core.v1.GlusterfsPersistentVolumeSource": ("endpoints", "path"),
    "core.v1.RBDPersistentVolumeSource": ("monitors", "image"),
    "core.v1.ISCSIPersistentVolumeSource": ("targetPortal", "iqn", "lun"),
    "core.v1.CinderPersistentVolumeSource": ("volumeID",),
    "core.v1.CephFSPersistentVolumeSource": ("monitors",),
    "core.v1.FlexPersistentVolumeSource": ("driver",),
    "core.v1.AzureFilePersistentVolumeSource": ("secretName", "shareName"),
    "core.v1.ScaleIOPersistentVolumeSource": ("gateway", "system", "secretRef"),
    "core.v1.LocalVolumeSource": ("path",),
    "core.v1.CSIPersistentVolumeSource": ("driver", "volumeHandle"),
    "core.v1.ServicePort": ("port",),
    "core.v1.PortStatus": ("port", "protocol"),
    "core.v1.Binding": ("target",),
    "storage.v1.VolumeAttachment": ("spec",),
    "storage.v1.VolumeAttachmentSpec": ("attacher", "source", "nodeName"),
    "storage.v1.VolumeAttachmentStatus": ("attached",),
    "apps.v1.StatefulSetSpec": ("selector", "template"),
    "apps.v1.StatefulSetStatus": ("replicas",),
    "apps.v1.ReplicaSetSpec": ("selector",),
    "apps.v1.ReplicaSetStatus": ("replicas",),
    "apps.v1.DeploymentSpec": ("selector", "template"),
    "apps.v1.DaemonSetSpec": ("selector", "template"),
    "apps.v1.DaemonSetStatus": (
        "currentNumberScheduled",
        "numberMisscheduled",
        "desiredNumberScheduled",
        "numberReady",
    ),
    "rbac.v1.PolicyRule": ("verbs",),
    "rbac.v1.RoleBinding": ("roleRef",),
    "rbac.v1.Subject": ("kind", "name"),
    "rbac.v1.RoleRef": ("kind", "name"),
    "rbac.v1.ClusterRoleBinding": ("roleRef",),
    "batch.v1.JobSpec": ("template",),
    "batch.v1.PodFailurePolicy": ("rules",),
    "batch.v1.PodFailurePolicyRule": ("action",),
    "batch.v1.PodFailurePolicyOnExitCodesRequirement": ("operator", "values"),
    "batch.v1.PodFailurePolicyOnPodConditionsPattern": ("type",),
    "batch.v1.SuccessPolicy": ("rules",),
    "batch.v1.JobCondition": ("type", "status"),
    "batch.v1.CronJobSpec": ("schedule", "jobTemplate"),
    "networking.v1.IPBlock": ("cidr",),
    "scheduling.v1.PriorityClass": ("value",),
    "autoscaling.v1.ScaleStatus": ("replicas",),
    "authorization.v1.SelfSubjectAccessReview": ("spec",),
    "authorization.v1.SubjectAccessReview": ("spec",),
    "authorization.v1.LocalSubjectAccessReview": ("spec",),
    "authorization.v1.SelfSubjectRulesReview": ("spec",),
    "authorization.v1.SubjectAccessReviewStatus": ("allowed",),
    "authorization.v1.SubjectRulesReviewStatus": (
        "resourceRules",
        "nonResourceRules",
        "incomplete",
    ),
    "authorization.v1.ResourceRule": ("verbs",),
    "authorization.v1.NonResourceRule": ("verbs",),
}


# The messages with type meta: a kind's, whether a body or a field (``Eviction.deleteOptions``).
_TOP_LEVEL = frozenset({*KINDS.values(), DELETE_OPTIONS})


def schema_name(message: str) -> str:
    """The real server's name for a table's message (``core.v1.Pod`` is
    ``io.k8s.api.core.v1.Pod``): kubectl prints its last segment as the type of a field."""
    package, _, name = message.rpartition(".")
    return f"{_PACKAGES.get(package, 'io.k8s.api.' + package)}.{name}"


def _ref(message: str) -> Schema:
    return {"$ref": REF_PREFIX + schema_name(message)}


def _gvk(api_version: str, kind: str) -> dict[str, str]:
    group, _, version = api_version.rpartition("/")
    return {"group": group, "kind": kind, "version": version}


def _api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def document_kinds(rts: Iterable[ResourceType]) -> Iterator[tuple[str, str]]:
    """The ``(apiVersion, kind)`` of the bodies a group-version's resources take: their own kinds
    and those of their subresources (``Scale``, ``Eviction``)."""
    for rt in rts:
        yield _api_version(rt.group, rt.version), rt.kind
        for sub in rt.subresources:
            if sub in SUBRESOURCE_KINDS:
                yield SUBRESOURCE_KINDS[sub]


def _fields(message: str) -> Iterator[Field]:
    """A message's fields as JSON sees them: embedded structs flattened into the parent."""
    for field in MESSAGES[message].values():
        if field.shape == "inline":
            yield from _fields(field.type)
        else:
            yield field


def _value(type_: str, *, element: bool) -> Schema:
    """The schema of one value of ``type_``: a field's own, or a list's or map's element's."""
    if type_ in SCALARS:
        schema = dict(_SCALAR_SCHEMAS[type_])
        if element and type_ in _ZERO:
            schema["default"] = _ZERO[type_]
        return schema
    if type_ == EXTRA_VALUE:
        return copy.deepcopy(_EXTRA_VALUE)
    if type_ in _WRAPPERS:
        return _ref(type_) if element else {"allOf": [_ref(type_)]}
    return {"allOf": [_ref(type_)], "default": {}}


class _Builder:
    """Walks the tables from each kind, building each message's schema once, from the first
    path that reaches it (the path decides the list annotations ``fieldsets`` knows)."""

    def __init__(self) -> None:
        self.schemas: dict[str, Schema] = {}
        self.atomic: set[str] = set()

    def kind(self, api_version: str, kind: str, message: str) -> None:
        self.message(message, kind, ())
        gvks = self.schemas[schema_name(message)].setdefault("x-kubernetes-group-version-kind", [])
        if _gvk(api_version, kind) not in gvks:
            gvks.append(_gvk(api_version, kind))

    def message(self, message: str, kind: str, names: fieldsets.Names) -> None:
        name = schema_name(message)
        if name in self.schemas:
            return
        if message in _WRAPPERS:
            self.schemas[name] = dict(_WRAPPERS[message])
            return
        schema: Schema = {"properties": {}, "type": "object"}
        self.schemas[name] = schema
        properties: dict[str, Schema] = {}
        if message in _TOP_LEVEL:
            properties["apiVersion"] = {"description": _API_VERSION_DESCRIPTION, "type": "string"}
            properties["kind"] = {"description": _KIND_DESCRIPTION, "type": "string"}
        required = _REQUIRED.get(message, ())
        for field in _fields(message):
            path = (*names, field.name)
            properties[field.name] = self.field(field, kind, path, field.name in required)
            if field.type in MESSAGES or field.type in _WRAPPERS:
                self.message(field.type, kind, path)
                if not field.shape and fieldsets.is_atomic(kind, path):
                    self.atomic.add(schema_name(field.type))
        schema["properties"] = dict(sorted(properties.items()))
        if required:
            schema["required"] = list(required)

    def field(self, field: Field, kind: str, path: fieldsets.Names, required: bool) -> Schema:
        if field.shape == "list":
            return {"items": _value(field.type, element=True), "type": "array", **_list(kind, path)}
        if field.shape == "map":
            return {"additionalProperties": _value(field.type, element=True), "type": "object"}
        schema = _value(field.type, element=False)
        if field.type in _ZERO and (field.always or required):
            schema["default"] = _ZERO[field.type]
        return schema

    def finish(self) -> dict[str, Schema]:
        for name in self.atomic:
            self.schemas[name]["x-kubernetes-map-type"] = "atomic"
        return dict(sorted(self.schemas.items()))


def _list(kind: str, path: fieldsets.Names) -> Schema:
    """The list annotations of the list at ``path``: keyed lists merge by their first key as
    strategic merge patch does, sets merge by value, the rest are atomic."""
    keys = fieldsets.list_keys(kind, path)
    if keys is not None:
        strategy = "merge,retainKeys" if path in _RETAIN_KEYS else "merge"
        return {
            "x-kubernetes-list-map-keys": list(keys),
            "x-kubernetes-list-type": "map",
            "x-kubernetes-patch-merge-key": keys[0],
            "x-kubernetes-patch-strategy": strategy,
        }
    if fieldsets.is_set(kind, path):
        return {"x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"}
    return {"x-kubernetes-list-type": "atomic"}


@cache
def all_schemas() -> dict[str, Schema]:
    """Every served message's schema, by its real name; the same for every document."""
    builder = _Builder()
    for api_version, kind in document_kinds(RESOURCE_TYPES):
        builder.kind(api_version, kind, KINDS[(api_version, kind)])
    for rt in RESOURCE_TYPES:
        builder.kind(_api_version(rt.group, rt.version), "DeleteOptions", DELETE_OPTIONS)
    return builder.finish()


def refs(schema: Any) -> Iterator[str]:
    """The names every ``$ref`` in ``schema`` points to."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield value.removeprefix(REF_PREFIX)
            else:
                yield from refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from refs(value)


def reachable(roots: Iterable[str]) -> dict[str, Schema]:
    """The schemas named by ``roots`` and all they reference, as a document's components."""
    schemas = all_schemas()
    found: set[str] = set()
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name not in found:
            found.add(name)
            pending.extend(refs(schemas[name]))
    return {name: schemas[name] for name in sorted(found)}


def group_version_schemas(rts: Iterable[ResourceType]) -> dict[str, Schema]:
    """The components of one group-version's document: its kinds, the kinds of their
    subresources, ``DeleteOptions`` (every delete's body) and what those reach."""
    roots = [schema_name(KINDS[key]) for key in document_kinds(rts)]
    return reachable([*roots, schema_name(DELETE_OPTIONS)])
