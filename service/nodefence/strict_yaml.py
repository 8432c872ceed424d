"""YAML for configuration: a key given twice in one mapping is an error, not "the last wins".

PyYAML, like most parsers, keeps the last of two equal keys without a word. In nodefence's files
that silently changes safety: an inventory whose ``compute01:`` was copied for compute02 and not
renamed maps compute01 to compute02's machine, and a policy with ``max_fenced_nodes`` twice (1,
then 10) runs with a budget of 10 while its reader sees 1. Every YAML file nodefence reads (the
policy, the BMC inventory) goes through :func:`load`, which names the key, where it is, and the
line of each copy.

Merge keys (``<<: *shared``) are YAML's own way to take keys from elsewhere and override them, so
a key that overrides a merged one is not a duplicate; two explicit copies in one mapping are.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.YAMLError):
    """A mapping repeats a key; ``message`` names it and both lines (never a value)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line

    def __str__(self) -> str:
        return self.message


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing a mapping that repeats a key."""

    # The dotted path of each mapping of the document, for the error message.
    paths: dict[int, str]

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        _refuse_duplicates(node, self.paths.get(id(node), ""))
        return super().construct_mapping(node, deep=deep)


def _index_paths(node: Node, path: str, into: dict[int, str]) -> None:
    if isinstance(node, MappingNode):
        into[id(node)] = path
        for key, value in node.value:
            name = key.value if isinstance(key, ScalarNode) else "?"
            _index_paths(value, f"{path}.{name}" if path else str(name), into)
    elif isinstance(node.value, list):
        for index, item in enumerate(node.value):
            if isinstance(item, Node):
                _index_paths(item, f"{path}[{index}]", into)


def _refuse_duplicates(node: MappingNode, path: str) -> None:
    seen: dict[Any, int] = {}
    for key, _value in node.value:
        if key.tag == MERGE_TAG or not isinstance(key, ScalarNode):
            continue
        # Keys are compared as YAML resolves them, so `1` and `"1"` differ, as in the mapping.
        ident = (key.tag, key.value)
        line = key.start_mark.line + 1
        if ident in seen:
            where = f"{path}.{key.value}" if path else str(key.value)
            raise DuplicateKeyError(
                f"{where} is given twice (lines {seen[ident]} and {line}); YAML would keep "
                "only the last silently, so nothing is taken from this file until one is "
                "removed or renamed",
                line,
            )
        seen[ident] = line


def load(text: str | bytes) -> Any:
    """The document in ``text`` (one document; ``None`` when empty), refusing repeated keys with
    :class:`DuplicateKeyError` and invalid YAML with PyYAML's own :class:`yaml.YAMLError`."""
    loader = _Loader(text)
    loader.paths = {}
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _index_paths(root, "", loader.paths)
        return loader.construct_document(root)
    finally:
        loader.dispose()
