"""The writer leaves the GIL to training (issue 51): beside a background checkpoint write of a 256 MB state, the writer's
holds of the GIL stay far shorter than those of a writer that builds a file as one bytes object (`safetensors.torch.save`,
then one write: 60-280 ms holds on 2 cores), as the GIL probe (`bench/harness.py`'s `GILProbe`: a thread that sleeps 1 ms in
a loop and records how late it wakes) sees them.

A late wake also comes from a machine that gives the probe no CPU (2 cores shared with another test file in CI): each write
is paired with a quiet stretch of the same length just after it, and what counts is the write's longest late wake over the
quiet one's. The two writers alternate, 5 writes each, so both meet the same load, and the test compares their medians:
a ratio to a baseline of the same run, in the first of up to 3 rounds that keeps to it, not a bound in milliseconds (an
absolute bound of a switch interval failed in CI, 10-20 ms medians beside another test file, where alone it sees 1-3 ms).
What a fit's steps see beside a write is `bench/fit_bench.py`'s to measure."""
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
FACTOR = 3       # ddpsafe's writer holds the GIL at least this many times less than the one that builds bytes

def state(mb:int=256, n:int=16) -> dict:
    "A model's weights (a third) and Adam's two moments, as the checkpoint's files hold them, `mb` MB in all"
    k = mb*2**20//4//3//n
    return {'model.safetensors': {f'{i}.weight': torch.randn(k) for i in range(n)},
            'state.pt': {'opt': {'state': {i: dict(exp_avg=torch.randn(k), exp_avg_sq=torch.randn(k), step=torch.tensor(1.)) for i in range(n)},
                                 'param_groups': [dict(lr=1e-3, params=list(range(n)))]}}}

def bytes_writers(files:dict) -> dict:
    "A writer of the weights that builds the whole file as bytes first (`safetensors.torch.save`): long holds"
    return dict(checkpoint_writers(files), **{'model.safetensors': FileWriter(lambda f: f.write(st.save(files['model.safetensors'])))})

def excess_holds(root:Path, writers:dict, saves:int=5) -> dict:
    "For each of `writers` (name -> files -> writers), taking turns, `saves` background writes: each one's longest late wake of the probe, less that of a quiet stretch as long just after it"
    files, w, out = StateBuffers().copy(state()), AsyncWriter(), {k: [] for k in writers}
    with GILProbe() as probe:
        for step in range(saves):
            for name, make in writers.items():
                t0 = time.perf_counter(); w.submit(lambda: write_checkpoint(root/name, step, make(files), {})); w.wait(); t1 = time.perf_counter()
                time.sleep(t1 - t0); t2 = time.perf_counter()          # the quiet stretch after it: the same machine, nothing written
                out[name].append(probe.longest(t0, t1) - probe.longest(t1 + 0.01, t2))
    assert w.close() is None
    return out

def test_writer_holds_the_gil_briefly(tmp_path):
    rounds = []
    for attempt in range(3):   # a loaded machine can stall either writer while it holds the GIL (100-400 ms, a write in 5): up to 3 rounds
        ex = excess_holds(tmp_path/str(attempt), dict(ddpsafe=checkpoint_writers, whole_bytes=bytes_writers))
        rounds.append({k: [round(x*1e3, 1) for x in v] for k, v in ex.items()})
        ours, whole = statistics.median(ex['ddpsafe']), statistics.median(ex['whole_bytes'])
        if whole > sys.getswitchinterval() + MARGIN and ours*FACTOR < whole: return
    raise AssertionError(f"in 3 rounds, ddpsafe's writer held the GIL more than a third as long as one that builds the file as bytes, or the probe saw neither (ms beyond the quiet stretches): {rounds}")
