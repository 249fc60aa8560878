"""`ddpsafe.write`: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier."""
# Not generated: nbdev makes no `__init__.py` of a subpackage; each module here is exported from its notebook in nbs/.
