"""Approval of fences in Slack, and notices of fences and unfences.

A fence in approval mode waits for a person's click; the click authorises it only when the button
value carries nodefence's own signature, has not expired, was pressed in the configured channel by
an allowed approver, and the live node is still the one the question was asked about. Every other
guard of the engine is judged again at the moment of the fence.
"""
