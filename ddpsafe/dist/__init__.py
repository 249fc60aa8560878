"""`ddpsafe.dist`: the ranks, the heartbeats that name a rank that stopped answering, restarts, the stop requests a process listens for, and the one way ranks agree."""
# Not generated: nbdev makes no `__init__.py` of a subpackage; each module here is exported from its notebook in nbs/.
