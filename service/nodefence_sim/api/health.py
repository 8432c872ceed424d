"""``/healthz``, ``/livez`` and ``/readyz`` as the generic API server answers them.

``ok`` in plain text; with ``?verbose`` every check on its own line and the summary line; each
check also at its own path (``/readyz/etcd``); ``?exclude=NAME`` skips a check, as load
balancers and kubeadm ask. The simulated server has no component that can fail a check, so
every check passes: the point is that probes and ``kubectl get --raw`` get the real answers.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

_POST_START_HOOKS = (
    "poststarthook/start-kube-apiserver-admission-initializer",
    "poststarthook/generic-apiserver-start-informers",
    "poststarthook/start-apiextensions-informers",
    "poststarthook/start-apiextensions-controllers",
    "poststarthook/bootstrap-controller",
    "poststarthook/rbac/bootstrap-roles",
    "poststarthook/scheduling/bootstrap-system-priority-classes",
    "poststarthook/start-cluster-authentication-info-controller",
    "poststarthook/aggregator-reload-proxy-client-cert",
)
CHECKS: dict[str, tuple[str, ...]] = {
    "healthz": ("ping", "log", "etcd", *_POST_START_HOOKS),
    "livez": ("ping", "log", "etcd", *_POST_START_HOOKS),
    "readyz": ("ping", "log", "etcd", "informer-sync", *_POST_START_HOOKS, "shutdown"),
}


def _text(body: str, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        text=body,
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def add_health_routes(app: web.Application) -> None:
    def endpoint(kind: str) -> Handler:
        async def all_checks(request: web.Request) -> web.Response:
            excluded = set(request.query.getall("exclude", []))
            if "verbose" not in request.query:
                return _text("ok")
            lines = [
                f"[+]{name} excluded: ok" if name in excluded else f"[+]{name} ok"
                for name in CHECKS[kind]
            ]
            return _text("\n".join([*lines, f"{kind} check passed", ""]))

        return all_checks

    def single(kind: str) -> Handler:
        async def one_check(request: web.Request) -> web.Response:
            if request.match_info["check"] not in CHECKS[kind]:
                return _text("404 page not found\n", status=404)
            return _text("ok")

        return one_check

    for kind in CHECKS:
        app.router.add_get(f"/{kind}", endpoint(kind))
        app.router.add_get(f"/{kind}/{{check:.+}}", single(kind))
