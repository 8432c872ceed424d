"""The settings and the policy every command starts from, or one line on stderr and exit 2.

Light on purpose: the CLI imports it at start, and what it needs is imported when it is called,
so ``nodefence --help`` loads nothing of the product.
"""

from __future__ import annotations

import sys
from typing import Any


def settings_or_exit(**overrides: Any) -> Any:
    from nodefence.errors import ConfigError
    from nodefence.settings import load_settings

    try:
        return load_settings(**overrides)
    except ConfigError as exc:
        # The message already begins "invalid settings:".
        print(f"nodefence: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def policy_or_exit(settings: Any) -> Any:
    from nodefence.policy import PolicyError
    from nodefence.runtime import effective_policy

    try:
        return effective_policy(settings)
    except PolicyError as exc:
        # The message already says "invalid policy FILE:" or "cannot read policy FILE:".
        print(f"nodefence: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
