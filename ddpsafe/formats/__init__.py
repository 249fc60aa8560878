"""`ddpsafe.formats`: the layouts of the files a checkpoint holds, without torch: torch's zip archive (`archive`) and safetensors' header (`safetensors`), so that the writer process can lay a file out from a slot's bytes."""
# Not generated: nbdev makes no `__init__.py` of a subpackage; each module here is exported from its notebook in nbs/.
