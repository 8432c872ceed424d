"""kubernetes_asyncio's configuration, authentication and ``ApiClient``, without importing its
generated API and model classes.

nodefence reads and writes plain JSON (``_preload_content=False``), so it needs the library for
kubeconfig and in-cluster credentials (token files, exec plugins, client certificates, TLS) and
for sending requests with them, and never for the several hundred generated classes. Yet
importing any part of the library runs ``kubernetes_asyncio/__init__.py``, which imports every
generated module: about 35 MB of resident memory and a few hundred milliseconds of every cold
start.

``defer_generated_modules`` registers the library's package modules (``kubernetes_asyncio``,
``kubernetes_asyncio.client`` and ``kubernetes_asyncio.client.models``) before they are imported,
as packages whose ``__init__`` has not run yet. Submodules import as usual; the names
``ApiClient`` and ``Configuration`` are bound at once; the first access to any other name of a
deferred package runs its real ``__init__`` in place, so code that uses the generated classes
(``client.CoreV1Api``, ``client.V1Pod``, ``kubernetes_asyncio.watch``) still gets them: the
deferral changes when they are imported, never what they are.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

DEFERRED = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.models")


def _deferred(name: str) -> None:
    """Register ``name`` as a package module whose ``__init__`` runs on first use of a name it
    defines (not on import of its submodules)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"{name} is not installed")
    loader = spec.loader
    module = importlib.util.module_from_spec(spec)
    ran = False

    def __getattr__(attribute: str) -> Any:  # the module attribute hook of PEP 562
        nonlocal ran
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        if importlib.util.find_spec(f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")
        if ran:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        ran = True
        loader.exec_module(module)
        return getattr(module, attribute)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def defer_generated_modules() -> None:
    """Make ``kubernetes_asyncio`` importable without its generated classes (idempotent; a
    no-op once the library was imported in full)."""
    for name in DEFERRED:
        _deferred(name)
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration

    package = sys.modules["kubernetes_asyncio.client"]
    package.__dict__.update(ApiClient=ApiClient, Configuration=Configuration)
