"""No hang without a name (issue 31): a DataLoader worker stuck before its loop is started again with the same seeds.

CPython 3.8-3.11 before their September 2024 releases (this machine's 3.11.7 among them) can deadlock a forked child in
its after-fork step while gloo's work thread holds the interpreter's thread-list lock (gh-112275). The stand-in here is
`launcher_train.py --hang-first-fork 1`: rank 1's first forked worker never returns from a fork handler, so it never
reaches torch's worker loop, as the deadlocked child does not. The job runs under the real `torchrun` on 2 CPU ranks
with fastai `DataLoaders` and 2 workers per rank; each launch is bounded, and a launch that does not end fails the test
with the ranks that did not report a result."""
from __future__ import annotations
import os, sys, json, subprocess
from pathlib import Path
import pytest, torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT, TORCHRUN = ROOT/'tests'/'scripts'/'launcher_train.py', Path(sys.executable).parent/'torchrun'
LIMIT = 240

def launch(run:Path, *extra) -> str:
    "torchrun with `launcher_train.py` for 2 epochs: its output; fails naming the ranks without a RESULT past `LIMIT` seconds"
    cmd = [str(TORCHRUN), '--nproc_per_node', '2', str(SCRIPT), str(run), '2', '--marks', str(run/'marks'), '--out', str(run/'w'),
           '--slow', '0', *map(str, extra)]
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', 'DDPSAFE_TIMEOUT': '60'}
    try: p = subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT, env=env, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        marks = {r: (run/'marks'/f'rank{r}.log') for r in (0, 1)}
        missing = [r for r, f in marks.items() if not f.exists() or 'RESULT' not in f.read_text()]
        pytest.fail(f'torchrun did not end within {LIMIT}s: ranks {missing} reported no result\n{(e.stdout or b"")[-3000:]}')
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    return p.stdout + p.stderr

def test_stuck_worker_started_again(tmp_path):
    "Rank 1's first worker never starts: it is killed and started again once, with a warning; the weights are a plain run's"
    plain = launch(tmp_path/'plain')
    out = launch(tmp_path/'stuck', '--hang-first-fork', 1, '--worker-start-seconds', 3)
    assert 'HANG in a forked worker' in out, out[-3000:]
    warned = [l for l in out.splitlines() if 'did not reach its loop within 3s of the fork' in l]
    assert len(warned) == 1 and 'rank 1' in warned[0], out[-3000:]
    assert 'did not reach' not in plain, plain[-3000:]
    for r in (0, 1):
        a, b = torch.load(tmp_path/f'plain/w.rank{r}'), torch.load(tmp_path/f'stuck/w.rank{r}')
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f'rank {r}: weights differ from the plain run'
