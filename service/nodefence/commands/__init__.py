"""The operator's commands (``explain``, ``release``, ``pause``, ``resume``, and what ``status``
adds about nodes held back): each in its own module, each run by the command line against the
configured cluster with the operator's own credentials."""
