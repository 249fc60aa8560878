"""`ddpsafe.state`: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes."""
# Not generated: nbdev makes no `__init__.py` of a subpackage; each module here is exported from its notebook in nbs/.
