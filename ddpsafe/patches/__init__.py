__all__ = []

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases

# %% ../../nbs/74_all.ipynb #4cc6f7f8
# ddpsafe.patches: every change to fastai and torch, in one place, and the fence that checks them against the installed releases