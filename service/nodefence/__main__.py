"""Allow ``python -m nodefence`` as well as the console script."""

from nodefence.cli import main

raise SystemExit(main())
