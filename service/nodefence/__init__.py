"""nodefence: verified non-graceful node shutdown handling for Kubernetes."""

__version__ = "0.1.0"
