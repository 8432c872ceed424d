"""What an update may not change, refused with the real server's 422 (``pkg/apis/core/validation``
and ``pkg/apis/apps/validation``), and the required fields checked on create.

A client that patches a pod's node, a StatefulSet's volume claim templates or an immutable
ConfigMap gets a success from a lenient simulator and an error from a real cluster; these
checks make it the error here too. Comparisons follow ``apiequality.Semantic.DeepEqual``, for
which an absent field, ``null`` and an empty list or map are all the same. The real pod and
claim messages end with a Go ``cmp.Diff`` of the two specs, which is not reproduced: the message
stops after the list of what may change.

Metadata needs no check here: the store keeps uid, creationTimestamp, namespace and the deletion
fields of the stored object, as ``rest.BeforeUpdate`` does, and refuses a name or uid that does
not match.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from nodefence_sim.errors import ApiError
from nodefence_sim.resources import (
    CONFIGMAPS,
    CRONJOBS,
    DAEMONSETS,
    DEPLOYMENTS,
    JOBS,
    NAMESPACES,
    PODS,
    PRIORITY_CLASSES,
    PVCS,
    REPLICASETS,
    SECRETS,
    STATEFULSETS,
    ResourceType,
)

Obj = dict[str, Any]
Version = tuple[int, int, int]
FieldError = tuple[str, str, str]  # (field, reason, message after the field)

IMMUTABLE = "field is immutable"
IMMUTABLE_WHEN_SET = "field is immutable when `immutable` is set"
_POD_UPDATABLE_OLD = (
    "`spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
    "`spec.tolerations` (only additions to existing tolerations) or "
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
_POD_UPDATABLE_NEW = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
_STS_UPDATABLE_OLD = (
    "'replicas', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and "
    "'minReadySeconds'"
)
_STS_UPDATABLE_NEW = (
    "'replicas', 'ordinals', 'template', 'updateStrategy', "
    "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds'"
)
_STS_UPDATABLE_FIELDS = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)
_SELECTOR_IMMUTABLE = frozenset(
    {DEPLOYMENTS.key, REPLICASETS.key, DAEMONSETS.key, STATEFULSETS.key, JOBS.key}
)
_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    f"used for validation is '{_DNS1123_LABEL}')"
)
_REASONS = {
    "Forbidden": "FieldValueForbidden",
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Duplicate value": "FieldValueDuplicate",
}


def semantic(value: Any) -> Any:
    """``value`` with null, empty lists and empty maps dropped, as Semantic.DeepEqual sees it."""
    if isinstance(value, Mapping):
        cleaned = {k: semantic(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [semantic(v) for v in value]
    return value


def _same(a: Any, b: Any) -> bool:
    return bool(semantic(a) == semantic(b))


def go_value(value: Any, type_name: str = "") -> str:
    """How ``field.Invalid`` prints a value: strings quoted, maps and selectors as ``%#v``."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if type_name == "LabelSelector" and isinstance(value, Mapping):
        labels = value.get("matchLabels")
        expressions = value.get("matchExpressions")
        rendered = ", ".join(
            "v1.LabelSelectorRequirement{"
            f"Key:{json.dumps(e.get('key', ''))}, Operator:{json.dumps(e.get('operator', ''))}, "
            f"Values:{_go_strings(e.get('values'))}}}"
            for e in expressions or []
        )
        exprs = (
            f"[]v1.LabelSelectorRequirement{{{rendered}}}"
            if expressions
            else "[]v1.LabelSelectorRequirement(nil)"
        )
        return f"v1.LabelSelector{{MatchLabels:{go_map(labels)}, MatchExpressions:{exprs}}}"
    if isinstance(value, Mapping):
        return go_map(value)
    return json.dumps(value)


def go_map(value: Mapping[str, Any] | None) -> str:
    if not value:
        return "map[string]string(nil)"
    items = ", ".join(f"{json.dumps(k)}:{json.dumps(str(v))}" for k, v in sorted(value.items()))
    return f"map[string]string{{{items}}}"


def _go_strings(values: Any) -> str:
    if not values:
        return "[]string(nil)"
    return "[]string{" + ", ".join(json.dumps(str(v)) for v in values) + "}"


def refuse(rt: ResourceType, name: str, errors: list[FieldError]) -> ApiError:
    """The 422 ``Invalid`` Status of ``errors`` (one error alone, several in brackets)."""
    qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    rendered = [f"{field}: {message}" for field, _reason, message in errors]
    listed = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {listed}',
        kind=rt.kind,
        name=name,
        group=rt.group,
        causes=[{"reason": r, "message": m, "field": f} for f, r, m in errors],
    )


def _error(field: str, kind: str, detail: str = "") -> FieldError:
    message = f"{kind}: {detail}" if detail else kind
    return (field, _REASONS[kind], message)


# ------------------------------------------------------------------ updates
def check_update(
    rt: ResourceType, old: Mapping[str, Any], new: Mapping[str, Any], version: Version
) -> None:
    """Raise the 422 the real server answers an update of ``old`` to ``new`` with, if any."""
    errors: list[FieldError] = []
    old_spec = old.get("spec") or {}
    new_spec = new.get("spec") or {}
    if rt.key == PODS.key:
        errors += _pod_update(old_spec, new_spec, version)
    elif rt.key == STATEFULSETS.key:
        errors += _statefulset_update(old_spec, new_spec, version)
    elif rt.key in (CONFIGMAPS.key, SECRETS.key):
        errors += _immutable_data(rt, old, new)
    elif rt.key == PVCS.key:
        errors += _claim_update(old, new)
    elif rt.key == PRIORITY_CLASSES.key and old.get("value") != new.get("value"):
        errors.append(_error("value", "Forbidden", "may not be changed in an update."))
    if (
        rt.key in _SELECTOR_IMMUTABLE
        and not errors
        and not _same(old_spec.get("selector"), new_spec.get("selector"))
    ):
        errors.append(
            _error(
                "spec.selector",
                "Invalid value",
                f"{go_value(new_spec.get('selector'), 'LabelSelector')}: {IMMUTABLE}",
            )
        )
    if errors:
        raise refuse(rt, str(old["metadata"]["name"]), errors)


def _pod_update(
    old: Mapping[str, Any], new: Mapping[str, Any], version: Version
) -> list[FieldError]:
    """``ValidatePodUpdate``: the new spec, defaulted as the server decodes it, with what may
    change put back as it was must be the old spec."""
    # Imported here: the API package imports this module for its handlers.
    from nodefence_sim.api.defaults import pod_spec

    errors: list[FieldError] = []
    munged = copy.deepcopy(dict(new))
    pod_spec(munged)
    # The stored spec is defaulted too, as the server's decoding from storage defaults it.
    stored = copy.deepcopy(dict(old))
    pod_spec(stored)
    old = stored
    for key in ("containers", "initContainers"):
        old_list = old.get(key) or []
        new_list = munged.get(key) or []
        if len(old_list) == len(new_list):
            for ours, theirs in zip(new_list, old_list, strict=True):
                if isinstance(ours, dict) and isinstance(theirs, Mapping):
                    ours["image"] = theirs.get("image")
    old_deadline, new_deadline = old.get("activeDeadlineSeconds"), new.get("activeDeadlineSeconds")
    if new_deadline is not None:
        if old_deadline is not None and int(new_deadline) > int(old_deadline):
            errors.append(
                _error(
                    "spec.activeDeadlineSeconds",
                    "Invalid value",
                    f"{new_deadline}: must be less than or equal to previous value",
                )
            )
    elif old_deadline is not None:
        errors.append(
            _error(
                "spec.activeDeadlineSeconds",
                "Invalid value",
                "null: must not update from a positive integer to nil value",
            )
        )
    munged["activeDeadlineSeconds"] = old_deadline
    old_grace = old.get("terminationGracePeriodSeconds")
    if (
        old_grace is not None
        and int(old_grace) < 0
        and new.get("terminationGracePeriodSeconds") == 1
    ):
        munged["terminationGracePeriodSeconds"] = old_grace
    errors += _only_added_tolerations(old.get("tolerations") or [], new.get("tolerations") or [])
    munged["tolerations"] = old.get("tolerations")
    if not _same(munged, old):
        listed = _POD_UPDATABLE_NEW if version[:2] >= (1, 27) else _POD_UPDATABLE_OLD
        errors.append(
            _error("spec", "Forbidden", f"pod updates may not change fields other than {listed}")
        )
    return errors


def _only_added_tolerations(old: list[Any], new: list[Any]) -> list[FieldError]:
    """``validateOnlyAddedTolerations``: every old toleration stays, a NoExecute one may only
    shorten its tolerationSeconds."""
    errors: list[FieldError] = []
    for toleration in old:
        kept = False
        for candidate in new:
            a, b = dict(semantic(toleration)), dict(semantic(candidate))
            seconds_old, seconds_new = (
                a.pop("tolerationSeconds", None),
                b.pop("tolerationSeconds", None),
            )
            if a != b:
                continue
            if seconds_old == seconds_new or (
                a.get("effect") == "NoExecute"
                and seconds_old is not None
                and seconds_new is not None
                and int(seconds_new) <= int(seconds_old)
            ):
                kept = True
                break
        if not kept:
            errors.append(
                _error(
                    "spec.tolerations",
                    "Forbidden",
                    "existing toleration can not be modified except its tolerationSeconds",
                )
            )
            break
    return errors


def _statefulset_update(
    old: Mapping[str, Any], new: Mapping[str, Any], version: Version
) -> list[FieldError]:
    munged = {k: v for k, v in new.items() if k not in _STS_UPDATABLE_FIELDS}
    kept = {k: v for k, v in old.items() if k not in _STS_UPDATABLE_FIELDS}
    if _same(munged, kept):
        return []
    listed = _STS_UPDATABLE_NEW if version[:2] >= (1, 26) else _STS_UPDATABLE_OLD
    return [
        _error(
            "spec",
            "Forbidden",
            f"updates to statefulset spec for fields other than {listed} are forbidden",
        )
    ]


def _immutable_data(
    rt: ResourceType, old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[FieldError]:
    errors: list[FieldError] = []
    if old.get("immutable") is True:
        if new.get("immutable") is not True:
            errors.append(_error("immutable", "Forbidden", IMMUTABLE_WHEN_SET))
        if (old.get("data") or {}) != (new.get("data") or {}):
            errors.append(_error("data", "Forbidden", IMMUTABLE_WHEN_SET))
        if rt.key == CONFIGMAPS.key and (old.get("binaryData") or {}) != (
            new.get("binaryData") or {}
        ):
            errors.append(_error("binaryData", "Forbidden", IMMUTABLE_WHEN_SET))
    if rt.key == SECRETS.key and (old.get("type") or "Opaque") != (new.get("type") or "Opaque"):
        errors.append(_error("type", "Invalid value", f"{go_value(new.get('type'))}: {IMMUTABLE}"))
    return errors


def _claim_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
    """``ValidatePersistentVolumeClaimUpdate``: the spec is fixed, except that an unbound
    claim may get its volumeName and a bound one its storage request."""
    old_spec = copy.deepcopy(dict(old.get("spec") or {}))
    new_spec = copy.deepcopy(dict(new.get("spec") or {}))
    if not old_spec.get("volumeName"):
        old_spec["volumeName"] = new_spec.get("volumeName")
    bound = (new.get("status") or old.get("status") or {}).get("phase") == "Bound"
    requests = (new_spec.get("resources") or {}).get("requests")
    if bound and isinstance(requests, dict):
        old_storage = ((old_spec.get("resources") or {}).get("requests") or {}).get("storage")
        requests["storage"] = old_storage
    if _same(old_spec, new_spec):
        return []
    return [
        _error(
            "spec",
            "Forbidden",
            "spec is immutable after creation except resources.requests for bound claims",
        )
    ]


# ------------------------------------------------------------------ creates
_TEMPLATES: dict[tuple[str, str], str] = {
    DEPLOYMENTS.key: "spec.template",
    REPLICASETS.key: "spec.template",
    STATEFULSETS.key: "spec.template",
    DAEMONSETS.key: "spec.template",
    JOBS.key: "spec.template",
    CRONJOBS.key: "spec.jobTemplate.spec.template",
}
_SELECTOR_REQUIRED = frozenset({DEPLOYMENTS.key, REPLICASETS.key, STATEFULSETS.key, DAEMONSETS.key})


def check_create(rt: ResourceType, obj: Mapping[str, Any]) -> None:
    """Raise the 422 a real server answers a create of ``obj`` with, for the required fields of
    pods and pod templates and the selector of an apps workload."""
    errors: list[FieldError] = []
    if rt.key == PODS.key:
        errors += _pod_spec_errors(obj.get("spec"), "spec")
    elif rt.key in _TEMPLATES:
        path = _TEMPLATES[rt.key]
        template: Any = obj
        for part in path.split("."):
            template = (template or {}).get(part) if isinstance(template, Mapping) else None
        spec = obj.get("spec") or {}
        if rt.key in _SELECTOR_REQUIRED:
            errors += _selector_errors(spec.get("selector"), template)
        errors += _pod_spec_errors((template or {}).get("spec"), f"{path}.spec")
    elif rt.key == PRIORITY_CLASSES.key:
        errors += _priority_class_errors(obj)
    if errors:
        raise refuse(rt, str((obj.get("metadata") or {}).get("name", "")), errors)


# pkg/apis/scheduling: the highest priority a class other than the system ones may have.
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000


def _priority_class_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    name = str((obj.get("metadata") or {}).get("name", ""))
    value = obj.get("value", 0)
    if name.startswith("system-") or not isinstance(value, int):
        return []
    if value > HIGHEST_USER_DEFINABLE_PRIORITY:
        return [
            _error(
                "value",
                "Forbidden",
                "maximum allowed value of a user defined priority is "
                f"{HIGHEST_USER_DEFINABLE_PRIORITY}",
            )
        ]
    return []


def _selector_errors(selector: Any, template: Any) -> list[FieldError]:
    if not isinstance(selector, Mapping) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        return [_error("spec.selector", "Required value")]
    labels = ((template or {}).get("metadata") or {}).get("labels") or {}
    wanted = selector.get("matchLabels") or {}
    if all(labels.get(k) == v for k, v in wanted.items()):
        return []
    return [
        _error(
            "spec.template.metadata.labels",
            "Invalid value",
            f"{go_map(labels)}: `selector` does not match template `labels`",
        )
    ]


def _pod_spec_errors(spec: Any, path: str) -> list[FieldError]:
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not containers:
        return [_error(f"{path}.containers", "Required value")]
    errors: list[FieldError] = []
    for key in ("initContainers", "containers"):
        seen: set[str] = set()
        for index, container in enumerate(spec.get(key) or []):
            at = f"{path}.{key}[{index}]"
            name = str((container or {}).get("name") or "")
            if not name:
                errors.append(_error(f"{at}.name", "Required value"))
            elif not re.fullmatch(_DNS1123_LABEL, name) or len(name) > 63:
                errors.append(
                    _error(
                        f"{at}.name", "Invalid value", f"{json.dumps(name)}: {_DNS1123_LABEL_MSG}"
                    )
                )
            elif name in seen:
                errors.append(_error(f"{at}.name", "Duplicate value", json.dumps(name)))
            seen.add(name)
            if not (container or {}).get("image"):
                errors.append(_error(f"{at}.image", "Required value"))
    return errors


# ------------------------------------------------------------- namespaces
def namespace_update(subresource: str, old: Mapping[str, Any], new: Obj) -> None:
    """The namespace registry's update strategies: a main update keeps ``spec.finalizers``
    (only ``finalize`` may change them); ``finalize`` changes nothing else."""
    if subresource == "finalize":
        finalizers = list((new.get("spec") or {}).get("finalizers") or [])
        merged = copy.deepcopy(dict(old))
        merged.setdefault("spec", {})["finalizers"] = finalizers
        merged["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get(
            "resourceVersion"
        ) or old["metadata"]["resourceVersion"]
        new.clear()
        new.update(merged)
    elif not subresource:
        spec = new.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec["finalizers"] = copy.deepcopy((old.get("spec") or {}).get("finalizers"))
        if spec["finalizers"] is None:
            del spec["finalizers"]


def registry_update(
    rt: ResourceType, subresource: str, old: Mapping[str, Any] | None, new: Obj, version: Version
) -> None:
    """Every update's registry step before the store: the namespace strategies, then the
    immutability checks of the main resource."""
    if old is None:
        return
    if rt.key == NAMESPACES.key:
        namespace_update(subresource, old, new)
    if not subresource:
        check_update(rt, old, new, version)
