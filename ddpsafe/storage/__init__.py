"""`ddpsafe.storage`: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it."""
# Not generated: nbdev makes no `__init__.py` of a subpackage; each module here is exported from its notebook in nbs/.
