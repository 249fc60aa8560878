__all__ = []

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it

# %% ../../nbs/74_all.ipynb #e61040c1
# ddpsafe.storage: files put in place by one commit protocol, the manifests, the folder's owner and the upload: no torch, so the CLI and the writer process stand on it