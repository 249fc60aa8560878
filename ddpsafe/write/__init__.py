__all__ = []

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier

# %% ../../nbs/74_all.ipynb #2dda9130
# ddpsafe.write: how a checkpoint is written: the tiers, the savers, the slots in /dev/shm and their writer process, the memory tier