"""The resource types the simulator serves, as the discovery documents describe them."""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


# The verbs of each subresource, as discovery lists them.
SUBRESOURCE_VERBS: dict[str, tuple[str, ...]] = {
    "status": ("get", "patch", "update"),
    "scale": ("get", "patch", "update"),
    "eviction": ("create",),
    "binding": ("create",),
    "finalize": ("update",),
    "log": ("get",),
    "exec": ("create", "get"),
    "attach": ("create", "get"),
    "portforward": ("create", "get"),
}
# Pod subresources served by a kubelet's container runtime, which the simulator does not have.
RUNTIME_SUBRESOURCES = ("log", "exec", "attach", "portforward")


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: enough to route requests and answer discovery."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = field(default=ALL_VERBS)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)


NAMESPACES = ResourceType(
    "", "v1", "namespaces", "Namespace", False, "namespace", ("ns",), ("status", "finalize")
)
NODES = ResourceType("", "v1", "nodes", "Node", False, "node", ("no",), ("status",))
PODS = ResourceType(
    "",
    "v1",
    "pods",
    "Pod",
    True,
    "pod",
    ("po",),
    ("status", "eviction", *RUNTIME_SUBRESOURCES),
    ("all",),
)
EVENTS = ResourceType("", "v1", "events", "Event", True, "event", ("ev",))
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",))
PVCS = ResourceType(
    "",
    "v1",
    "persistentvolumeclaims",
    "PersistentVolumeClaim",
    True,
    "persistentvolumeclaim",
    ("pvc",),
    ("status",),
)
PVS = ResourceType(
    "",
    "v1",
    "persistentvolumes",
    "PersistentVolume",
    False,
    "persistentvolume",
    ("pv",),
    ("status",),
)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease")
VOLUME_ATTACHMENTS = ResourceType(
    "storage.k8s.io",
    "v1",
    "volumeattachments",
    "VolumeAttachment",
    False,
    "volumeattachment",
    (),
    ("status",),
)
STATEFULSETS = ResourceType(
    "apps",
    "v1",
    "statefulsets",
    "StatefulSet",
    True,
    "statefulset",
    ("sts",),
    ("status", "scale"),
    ("all",),
)
REPLICASETS = ResourceType(
    "apps",
    "v1",
    "replicasets",
    "ReplicaSet",
    True,
    "replicaset",
    ("rs",),
    ("status", "scale"),
    ("all",),
)
DEPLOYMENTS = ResourceType(
    "apps",
    "v1",
    "deployments",
    "Deployment",
    True,
    "deployment",
    ("deploy",),
    ("status", "scale"),
    ("all",),
)
DAEMONSETS = ResourceType(
    "apps", "v1", "daemonsets", "DaemonSet", True, "daemonset", ("ds",), ("status",), ("all",)
)

SECRETS = ResourceType("", "v1", "secrets", "Secret", True, "secret")
SERVICES = ResourceType(
    "", "v1", "services", "Service", True, "service", ("svc",), ("status",), ("all",)
)
SERVICE_ACCOUNTS = ResourceType(
    "", "v1", "serviceaccounts", "ServiceAccount", True, "serviceaccount", ("sa",)
)
_RBAC = "rbac.authorization.k8s.io"
ROLES = ResourceType(_RBAC, "v1", "roles", "Role", True, "role")
ROLE_BINDINGS = ResourceType(_RBAC, "v1", "rolebindings", "RoleBinding", True, "rolebinding")
CLUSTER_ROLES = ResourceType(_RBAC, "v1", "clusterroles", "ClusterRole", False, "clusterrole")
CLUSTER_ROLE_BINDINGS = ResourceType(
    _RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False, "clusterrolebinding"
)
JOBS = ResourceType("batch", "v1", "jobs", "Job", True, "job", (), ("status",), ("all",))
CRONJOBS = ResourceType(
    "batch", "v1", "cronjobs", "CronJob", True, "cronjob", ("cj",), ("status",), ("all",)
)
NETWORK_POLICIES = ResourceType(
    "networking.k8s.io",
    "v1",
    "networkpolicies",
    "NetworkPolicy",
    True,
    "networkpolicy",
    ("netpol",),
)
PDBS = ResourceType(
    "policy",
    "v1",
    "poddisruptionbudgets",
    "PodDisruptionBudget",
    True,
    "poddisruptionbudget",
    ("pdb",),
    ("status",),
)
PRIORITY_CLASSES = ResourceType(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, "priorityclass", ("pc",)
)
_AUTHZ = "authorization.k8s.io"
SELF_SUBJECT_ACCESS_REVIEWS = ResourceType(
    _AUTHZ,
    "v1",
    "selfsubjectaccessreviews",
    "SelfSubjectAccessReview",
    False,
    "",
    verbs=("create",),
)
SUBJECT_ACCESS_REVIEWS = ResourceType(
    _AUTHZ, "v1", "subjectaccessreviews", "SubjectAccessReview", False, "", verbs=("create",)
)
LOCAL_SUBJECT_ACCESS_REVIEWS = ResourceType(
    _AUTHZ,
    "v1",
    "localsubjectaccessreviews",
    "LocalSubjectAccessReview",
    True,
    "",
    verbs=("create",),
)
SELF_SUBJECT_RULES_REVIEWS = ResourceType(
    _AUTHZ,
    "v1",
    "selfsubjectrulesreviews",
    "SelfSubjectRulesReview",
    False,
    "",
    verbs=("create",),
)
# Reviews are answered, never stored.
REVIEWS = frozenset(
    rt.key
    for rt in (
        SELF_SUBJECT_ACCESS_REVIEWS,
        SUBJECT_ACCESS_REVIEWS,
        LOCAL_SUBJECT_ACCESS_REVIEWS,
        SELF_SUBJECT_RULES_REVIEWS,
    )
)

RESOURCE_TYPES: tuple[ResourceType, ...] = (
    NAMESPACES,
    NODES,
    PODS,
    EVENTS,
    CONFIGMAPS,
    PVCS,
    PVS,
    LEASES,
    VOLUME_ATTACHMENTS,
    STATEFULSETS,
    REPLICASETS,
    DEPLOYMENTS,
    DAEMONSETS,
    SECRETS,
    SERVICES,
    SERVICE_ACCOUNTS,
    ROLES,
    ROLE_BINDINGS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    JOBS,
    CRONJOBS,
    NETWORK_POLICIES,
    PDBS,
    PRIORITY_CLASSES,
    SELF_SUBJECT_ACCESS_REVIEWS,
    SUBJECT_ACCESS_REVIEWS,
    LOCAL_SUBJECT_ACCESS_REVIEWS,
    SELF_SUBJECT_RULES_REVIEWS,
)

BY_KIND: dict[str, ResourceType] = {rt.kind: rt for rt in RESOURCE_TYPES}


def find(group: str, version: str, plural: str) -> ResourceType | None:
    """Resolve a URL's group/version/plural to a served type (None: 404)."""
    for rt in RESOURCE_TYPES:
        if rt.group == group and rt.version == version and rt.plural == plural:
            return rt
    return None
