"""The Kubernetes adapter: reading facts and making idempotent, preconditioned writes."""
