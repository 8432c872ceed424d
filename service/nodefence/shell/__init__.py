"""The imperative shell around the engine, one job per module.

``fencer`` is the way in: an alert's events and the reconcile pass, each node through the loop.
``loop`` reads a snapshot, decides and commits until no precondition failed (and after a fence
turns again until the node is settled: purges, a reboot's power-on, the VolumeAttachments); the
decisions people ask for (an operator's ``release``, a person's answer in Slack) go through it
too. ``commit`` carries out a decision's actions, one handler per action type; ``report`` says
what happened (log line, metrics, Events on the Node, notices for people). The rest are steps
taken around the loop: before deciding, ``machine_binding`` (the node's machine from the
inventory and the other Nodes reporting its systemUUID) and ``external_proof`` (proof someone
else wrote); ``power_step`` (whether the node's machine is off: the BMC step with its identity
checks), ``dry_run_power`` (the read-only BMC read in dry-run), ``volume_gauge`` (the
VolumeAttachments still attached to fenced nodes), ``cached_refusal`` (refusals decided on cached
facts), ``approval_requester`` (what the commit asks of the approval channel) and
``active_alerts`` (the reconcile pass's second look at the alerts Alertmanager holds).

Where things go: a new action is an entry in ``engine.action_kinds`` and a type in
``engine.model.Action``, decided in ``engine``, with a handler in ``commit.HANDLERS`` (a test
fails until it has both). A new guard goes in ``engine.guards``; a new fencing driver is a
module in ``fencing.drivers`` and one row in ``engine.drivers``; a new alert source in
``alerts``; a background loop in ``background``. Every part is built in ``nodefence.runtime``.
"""
