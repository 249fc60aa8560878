"""The writer leaves the GIL to training (issue 51): beside a background checkpoint write of a 256 MB state, no writer
hold of the GIL lasts much over one switch interval (`sys.getswitchinterval()`, 5 ms), as the GIL probe
(`bench/harness.py`'s `GILProbe`: a thread that sleeps 1 ms in a loop and records how late it wakes) sees it.

A late wake also comes from a machine that gives the probe no CPU (2 shared cores in CI): each write is paired with a
quiet stretch of the same length just before it, and what counts is the write's longest late wake over the quiet one's,
the median over 5 writes, in the first of up to 3 rounds that keeps within the bound. A bound on a hold, not a speed claim. It fails for a writer that builds the file as one bytes
object (`safetensors.torch.save`, then one write): 80-280 ms holds here (`test_the_probe_sees_a_long_hold`)."""
from __future__ import annotations
import sys, time, statistics
from pathlib import Path
import torch
import safetensors.torch as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'bench'))
from harness import GILProbe
from ddpsafe.storage.commit import FileWriter
from ddpsafe.storage.manifest import write_checkpoint
from ddpsafe.state.parts import checkpoint_writers
from ddpsafe.write.snapshot import AsyncWriter, StateBuffers

MARGIN = 0.003   # a wake-up's own latency and the probe's tick, beyond the switch interval

def state(mb:int=256, n:int=16) -> dict:
    "A model's weights (a third) and Adam's two moments, as the checkpoint's files hold them, `mb` MB in all"
    k = mb*2**20//4//3//n
    return {'model.safetensors': {f'{i}.weight': torch.randn(k) for i in range(n)},
            'state.pt': {'opt': {'state': {i: dict(exp_avg=torch.randn(k), exp_avg_sq=torch.randn(k), step=torch.tensor(1.)) for i in range(n)},
                                 'param_groups': [dict(lr=1e-3, params=list(range(n)))]}}}

def excess_holds(root:Path, writers, saves:int=5) -> list:
    "For each of `saves` background writes: its longest late wake of the probe, less that of a quiet stretch as long just before it"
    files, w, out = StateBuffers().copy(state()), AsyncWriter(), []
    with GILProbe() as probe:
        for step in range(saves):
            t0 = time.perf_counter(); w.submit(lambda: write_checkpoint(root, step, writers(files), {})); w.wait(); t1 = time.perf_counter()
            time.sleep(t1 - t0); t2 = time.perf_counter()          # the quiet stretch after it: the same machine, nothing written
            out.append(probe.longest(t0, t1) - probe.longest(t1 + 0.01, t2))
    assert w.close() is None
    return out

def test_writer_holds_the_gil_briefly(tmp_path):
    rounds = []
    for attempt in range(3):   # a machine loaded by other jobs can starve the writer (niceness 19) while it holds the GIL: up to 3 rounds
        rounds.append(ex := excess_holds(tmp_path/str(attempt), checkpoint_writers))
        if statistics.median(ex) <= sys.getswitchinterval() + MARGIN: return
    raise AssertionError(f'in 3 rounds of 5 writes, the writer held the GIL (ms beyond the quiet stretches): {[[round(x*1e3, 1) for x in ex] for ex in rounds]}')

def bytes_writers(files:dict) -> dict:
    "A writer of the weights that builds the whole file as bytes first (`safetensors.torch.save`): long holds"
    return dict(checkpoint_writers(files), **{'model.safetensors': FileWriter(lambda f: f.write(st.save(files['model.safetensors'])))})

def test_the_probe_sees_a_long_hold(tmp_path):
    ex = excess_holds(tmp_path, bytes_writers, saves=3)
    assert statistics.median(ex) > sys.getswitchinterval() + MARGIN, [round(x*1e3, 1) for x in ex]
