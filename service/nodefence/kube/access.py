"""Where a command finds its cluster, as kubectl does: ``--kubeconfig`` (one file), else
``KUBECONFIG`` (a list of files, merged), else ``~/.kube/config`` if it exists, else the
in-cluster service account.

A broken kubeconfig is one line naming the file and what is wrong with it, checked before the
library reads it: the library's own errors on an empty or malformed file are tracebacks about
``NoneType`` that say nothing an operator can act on at 3 a.m.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from nodefence.errors import ConfigError

DEFAULT = Path("~/.kube/config")
SEPARATOR = os.pathsep
# The kubeconfig context when no --context is given (kubectl's own default: current-context).
CONTEXT_ENV = "NODEFENCE_CONTEXT"


class KubeconfigError(ConfigError):
    """The kubeconfig named cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Source:
    """The kubeconfig files to merge (``None``: the in-cluster service account), and how the
    operator named them, for messages."""

    files: tuple[Path, ...] | None
    named_by: str

    @property
    def in_cluster(self) -> bool:
        return self.files is None


def locate(explicit: str | None = None) -> Source:
    """The kubeconfig a command uses, by kubectl's precedence."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise KubeconfigError(f"kubeconfig {explicit}: no such file")
        return Source((path,), f"kubeconfig {explicit}")
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        files = tuple(Path(p).expanduser() for p in listed.split(SEPARATOR) if p)
        present = tuple(p for p in files if p.is_file())
        if not present:
            raise KubeconfigError(f"KUBECONFIG={listed}: none of its files exists")
        return Source(present, f"KUBECONFIG={listed}")
    default = DEFAULT.expanduser()
    if default.is_file():
        return Source((default,), f"kubeconfig {DEFAULT}")
    return Source(None, "the in-cluster service account (no KUBECONFIG, no ~/.kube/config)")


def check_files(source: Source) -> None:
    """Each file parses as a kubeconfig: a YAML mapping whose lists are lists."""
    for path in source.files or ():
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise KubeconfigError(f"kubeconfig {path}: cannot be read: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise KubeconfigError(
                f"kubeconfig {path}: not valid YAML: {_yaml_problem(exc)}"
            ) from None
        if not isinstance(data, dict):
            raise KubeconfigError(
                f"kubeconfig {path}: empty or not a kubeconfig (expected a mapping with "
                "clusters, contexts and users)"
            )
        for key in ("clusters", "contexts", "users"):
            value = data.get(key)
            if value is not None and not isinstance(value, list):
                raise KubeconfigError(f"kubeconfig {path}: {key} must be a list")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} (line {mark.line + 1})" if mark is not None else str(problem)
