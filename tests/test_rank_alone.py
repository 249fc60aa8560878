"""Code that runs on one rank (issue 40): the rows of the issue's table, each run under the real `torchrun` on 2 CPU ranks
with fastai `DataLoaders` and 2 worker processes per rank, first with stock fastai, then with `from ddpsafe.all import *`.

The script (`tests/scripts/rank_alone.py`) is written as users write it: the script starts its own process group, and
branches on the rank (`if rank == 0: learn.save('m')`, `cbs=[CSVLogger()] if rank == 0 else []`) before a
`dist.barrier()`. Stock fastai runs with one change only, `DistributedDL`'s broadcast without `.cuda()` on the CPU.
`DDPSAFE_TIMEOUT` is left at its default (30 minutes): a wait named here is named by the heartbeats, within seconds.

- a row where stock finishes finishes with ddpsafe, with the same files (stock's arm for every row with `DDPSAFE_FULL=1`,
  else for two: each row's ddpsafe arm still checks the file rank 0 wrote);
- a callback that decides for every rank, on rank 0 only, is an error on both ranks before the fit's first step;
- a file that only rank 0 reads (`learn.load`, `load_learner`) while rank 1 waits in a barrier, or has ended its script,
  is read by rank 0 alone once it sees rank 1 wait elsewhere, and both finish;
- a collective that only rank 0 makes (`get_preds`, fastai's `DistributedDL`) while rank 1 waits in a barrier ends both
  ranks within 60 s of the branch, with a message that names both ranks' calls.
Every launch is bounded: one that does not end in time is killed and reported with the ranks that printed no result.
Times and outcomes are printed (`-s`) and appended as JSON lines to `$DDPSAFE_RANK_ALONE_REPORT` when set."""
from __future__ import annotations
import os, re, sys, json, time, subprocess
from pathlib import Path
from conftest import full_run
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT, TORCHRUN = ROOT/'tests'/'scripts'/'rank_alone.py', Path(sys.executable).parent/'torchrun'
LIMIT = 240          # seconds a launch may take at most, start-up on a loaded 2-core machine included

def launch(run:Path, scenario:str, stock:bool, limit:float=LIMIT, hang_ok:bool=False) -> dict:
    "Run one scenario: exit code, seconds, output, each rank's files, errors and branch time, and the time after the last branch"
    cmd = [str(TORCHRUN), '--nproc_per_node', '2', str(SCRIPT), str(run), scenario] + (['--stock'] if stock else [])
    env = {**{k: v for k,v in os.environ.items() if k != 'DDPSAFE_TIMEOUT'}, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1'}
    t0 = time.monotonic()
    with open(f'{run}.out', 'w') as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try: code = p.wait(limit)
        except subprocess.TimeoutExpired: code = None
    end, text = time.time(), Path(f'{run}.out').read_text()
    if code is None: subprocess.run(['pkill', '-9', '-f', str(run)]); p.wait()
    res = dict(code=code, seconds=round(time.monotonic() - t0, 1), out=text,
               files={int(r): eval(f) for r,f in re.findall(r'RESULT rank=(\d) files=(\[.*?\])', text)},
               errors={int(r): m for r,m in re.findall(r'ERROR rank=(\d) (.*?)(?=ERROR rank=\d|$)', text, re.M)},
               branch={int(r): float(t) for r,t in re.findall(r'BRANCH rank=(\d) at=([\d.]+)', text)})
    res['after_branch'] = round(end - max(res['branch'].values()), 1) if res['branch'] else None
    if code is None and not hang_ok:
        pytest.fail(f'{scenario} ({"stock" if stock else "ddpsafe"}) did not end within {limit:g}s: ranks '
                    f'{[r for r in (0, 1) if r not in res["files"]]} printed no RESULT\n{text[-4000:]}')
    rec = dict(scenario=scenario, arm='stock' if stock else 'ddpsafe', exit=code, seconds=res['seconds'],
               after_branch=res['after_branch'], files=res['files'].get(0), errors=res['errors'])
    print(json.dumps(rec))
    if f := os.environ.get('DDPSAFE_RANK_ALONE_REPORT'):
        with open(f, 'a') as o: o.write(json.dumps(rec) + '\n')
    return res

def finished(r:dict) -> bool: return r['code'] == 0 and sorted(r['files']) == [0, 1]

STOCK_SHORT = {'save-in-ctx', 'csvlogger'}   # the rows whose stock arm runs by default

@pytest.mark.parametrize('scenario, written', [
    ('save-in-ctx', 'models/m.pth'), ('save-after-ctx', 'models/m.pth'), ('save_model', 'plain.pth'),
    ('csvlogger', 'history.csv'), ('export', 'export.pkl')])
def test_rank0_writes_alone(tmp_path, scenario, written):
    "What stock fastai lets rank 0 write alone, ddpsafe lets it write: both finish, with the same files"
    safe = launch(tmp_path/'ddpsafe', scenario, stock=False)
    assert finished(safe), f'ddpsafe did not finish {scenario}:\n{safe["out"][-4000:]}'
    assert written in safe['files'][0], safe['files']
    runs = ['ddpsafe']
    if full_run() or scenario in STOCK_SHORT:   # stock's own arm: 2 more launches a row
        stock = launch(tmp_path/'stock', scenario, stock=True); runs.append('stock')
        assert finished(stock), f'stock fastai did not finish {scenario}:\n{stock["out"][-3000:]}'
        assert safe['files'] == stock['files'], f'files differ: stock {stock["files"]}, ddpsafe {safe["files"]}'
    if scenario == 'csvlogger':   # the header and one line an epoch, from rank 0
        for run in runs: assert len((tmp_path/run/'history.csv').read_text().splitlines()) == 3, run

def test_deciding_callback_on_rank0_only(tmp_path):
    "SaveModelCallback on rank 0 only: stock fails at the end of the fit; ddpsafe raises on both ranks before the first step"
    stock = launch(tmp_path/'stock', 'savemodelcb', stock=True)
    safe = launch(tmp_path/'ddpsafe', 'savemodelcb', stock=False)
    assert stock['code'] != 0, 'stock fastai finished with SaveModelCallback on rank 0 only: the comparison is moot'
    assert safe['code'] != 0 and sorted(safe['errors']) == [0, 1], safe['out'][-4000:]
    for r, msg in safe['errors'].items():
        assert msg.startswith('CallbacksDiffer: SaveModelCallback is on rank 0 only, not on rank 1: it decides for every rank'), (r, msg)
    assert '0         ' not in safe['out'], 'an epoch ran before the error'   # fastai's progress table prints each epoch's line

BARRIER = 'rank 1 waits in torch.distributed.barrier (rank_alone.py:'

@pytest.mark.parametrize('scenario', ['load-in-ctx', 'load-then-end', 'load_learner'])
def test_rank0_reads_alone(tmp_path, scenario):
    "A file that rank 0 alone reads, rank 1 in a barrier or gone: rank 0 reads its own file once it sees rank 1 wait elsewhere, and both finish"
    safe = launch(tmp_path/'ddpsafe', scenario, stock=False)
    assert finished(safe), f'ddpsafe did not finish {scenario}:\n{safe["out"][-4000:]}'
    assert safe['after_branch'] < 45, f'{safe["after_branch"]}s after the branch'   # a few beats to see rank 1 elsewhere
    assert 'exits with code' not in safe['out'] and 'RanksApart' not in safe['out'], safe['out'][-4000:]

def test_rank0_waits_alone_named(tmp_path):
    "A collective on rank 0 alone (fastai's `DistributedDL` in `get_preds`), rank 1 in a barrier: stock waits; ddpsafe ends both within 60 s, naming where each is"
    stock = launch(tmp_path/'stock', 'predict', stock=True, limit=60, hang_ok=True)   # stock's own hang, reproduced (bounded)
    assert stock['code'] is None, f'stock fastai did not wait in predict:\n{stock["out"][-3000:]}'
    safe = launch(tmp_path/'ddpsafe', 'predict', stock=False)
    out = safe['out']
    assert safe['code'] not in (0, None), out[-4000:]
    assert safe['after_branch'] is not None and safe['after_branch'] < 60, f'{safe["after_branch"]}s after the branch'
    for e in ['rank 0 waits in Learner.get_preds at ', BARRIER]: assert e in out, f'{e!r} not in the output:\n{out[-4000:]}'
    said = set(re.findall(r'Rank (\d) exits with code 1', out)) | {str(r) for r, m in safe['errors'].items() if 'rank 0 waits in Learner.get_preds' in m}
    assert said == {'0', '1'}, f'not every waiting rank named the wait: {said}\n{out[-4000:]}'
