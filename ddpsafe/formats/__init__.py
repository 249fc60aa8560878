__all__ = []

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default

# %% ../../nbs/74_all.ipynb #bc62ae13
# ddpsafe.formats: tensors and objects to files and back: safetensors, torch's format, loads that never unpickle by default