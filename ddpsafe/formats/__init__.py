"""`ddpsafe.formats`: tensors and objects to files and back: safetensors, torch's format (its archive laid out without torch, for the writer process), loads that never unpickle by default."""
# Not generated: nbdev makes no `__init__.py` of a subpackage; each module here is exported from its notebook in nbs/.
