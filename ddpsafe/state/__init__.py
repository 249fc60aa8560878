__all__ = []

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes

# %% ../../nbs/74_all.ipynb #15584146
# ddpsafe.state: what a checkpoint holds, part by part; sharded state; which checkpoint a resume takes