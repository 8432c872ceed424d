"""The imperative shell around the engine, one job per module.

``loop`` reads a snapshot, decides and commits until no precondition failed; ``commit`` carries
out a decision's actions, one handler per action type; ``report`` says what happened (log line,
metrics, Events on the Node, notices for people). The rest are steps the loop's caller takes
around it: ``proof`` (external power-off proof read before deciding), ``power_step`` (the BMC),
``settle`` (purging what the taint manager evicts), ``volumes`` (VolumeAttachments of a fenced
node) and ``refresh`` (what is kept fresh in the background while serving).
"""
