"""An import-linter contract type: no import circle among a package's modules.

import-linter's own ``acyclic_siblings`` judges whole sibling packages; a circle between two
modules inside one package (``policy`` and ``fencing.registry``, say) is what makes a newcomer's
change import half the product, so this one looks at modules: every strongly connected group of
two or more modules is a circle, reported with one of its paths.
"""

from __future__ import annotations

from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


def circles(graph: ImportGraph, package: str) -> list[list[str]]:
    """Each group of ``package``'s modules that import one another in a circle (Tarjan's
    strongly connected components, without recursion)."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    inside = set(modules)
    edges = {
        m: sorted(i for i in graph.find_modules_directly_imported_by(m) if i in inside)
        for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, at = work.pop()
            if at == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if at < len(edges[node]):
                work.append((node, at + 1))
                child = edges[node][at]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def one_path(graph: ImportGraph, group: list[str]) -> list[str]:
    """A circle through the group's first module, as the modules it passes."""
    first = group[0]
    for imported in sorted(graph.find_modules_directly_imported_by(first)):
        if imported in group:
            back = graph.find_shortest_chain(importer=imported, imported=first)
            if back:
                return [first, *back]
    return group


class AcyclicContract(Contract):
    """Configuration: ``packages``, the packages whose modules may not import in a circle."""

    type_name = "acyclic"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        del verbose
        found = [
            one_path(graph, group)
            for package in self.packages  # type: ignore[attr-defined]
            for group in circles(graph, str(package))
        ]
        return ContractCheck(kept=not found, metadata={"circles": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        circles_found: list[list[str]] = check.metadata["circles"]
        for path in circles_found:
            output.print_error(" -> ".join(path), bold=False)
            output.new_line()

    def __repr__(self) -> str:
        return f"AcyclicContract({self.name!r})"


__all__: list[Any] = ["AcyclicContract", "circles"]
