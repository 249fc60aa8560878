"""`ddpsafe.patches`: every change to fastai and torch, in one place, and the fence that checks them against the installed releases."""
# Not generated: nbdev makes no `__init__.py` of a subpackage; each module here is exported from its notebook in nbs/.
