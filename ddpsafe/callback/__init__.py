__all__ = []

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves

# %% ../../nbs/74_all.ipynb #71f17c3a
# ddpsafe.callback: the callbacks a fit runs: CheckpointCallback, the trackers made safe, preemption, the interval between saves