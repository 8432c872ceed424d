"""Alertmanager webhook payloads and their reduction to engine events."""
