"""`ddpsafe.callback`: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves."""
# Not generated: nbdev makes no `__init__.py` of a subpackage; each module here is exported from its notebook in nbs/.
