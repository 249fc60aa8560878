__all__ = []

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree

# %% ../../nbs/74_all.ipynb #e6f916a7
# ddpsafe.dist: the ranks, the heartbeats that name a rank that stopped answering, restarts, and the one way ranks agree