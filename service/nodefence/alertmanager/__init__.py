"""Alertmanager's API v2, read by the reconcile pass to find node alerts still firing.

A webhook is delivered once per change and then only every ``repeat_interval``; asking
Alertmanager directly is what lets a fence refused for a passing reason be tried again within
one reconcile period.
"""
