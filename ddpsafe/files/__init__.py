"""`ddpsafe.files`: the safe files: tensors and objects to bytes and back (`codec`), written by rank 0 alone and read by every rank alike (`safe`)."""
# Not generated: nbdev makes no `__init__.py` of a subpackage; each module here is exported from its notebook in nbs/.
