"""The imperative shell around the engine, one job per module.

``loop`` reads a snapshot, decides and commits until no precondition failed (and after a fence
turns again until the node is settled: purges, a reboot's power-on, the VolumeAttachments);
``commit`` carries out a decision's actions, one handler per action type; ``report`` says what
happened (log line, metrics, Events on the Node, notices for people) and in which words. The
rest are steps taken around the loop: ``proof`` (external power-off proof read before deciding),
``power_step`` (the BMC), ``volume_gauge`` (the VolumeAttachments still attached to fenced
nodes), ``refresh`` (what is kept fresh in the background while serving), ``cached_refusal``
(refusals decided on cached facts), ``dry_run_power`` (the BMC asked, never told, in dry-run)
and ``active_alerts`` (the reconcile pass's second look at the alerts Alertmanager holds).

Where things go: a new action is a type in ``engine.model.Action``, decided in ``engine``, with
a handler in ``commit.HANDLERS`` (a test fails until it has one) and its words in ``report``.
A new guard goes in ``engine.guards``; a new fencing driver in ``fencing`` (registered in
``fencing.registry``); a new alert source in ``alerts``. Every part is built in
``nodefence.runtime``.
"""
