"""Proof (issue 3): every race ddpsafe guards against, first reproduced with the unguarded pattern at a measured rate,
then the ddpsafe pattern passing every attempt.

1. `slow_writer`: rank 0 saves 50-200 ms late, rank 1 loads at once: missing or stale file. `atomic_save` + `safe_load`.
2. `overwrite_dir`: 4 ranks each `rmtree` + `makedirs` the run folder: errors and lost files. `prepare_dir(overwrite=True)`.
3. `exists_hang`: ranks decide from their own `os.path.exists`, then take different collectives: a hang, caught by
   the harness timeout (`RanksFailed.missing`). `agree(os.path.exists(f))` + `safe_load`.
4. `same_file_dls`, `same_file_state_dict`: 4 ranks `torch.save` the same 4 MB file, then load it: torn or failed loads.
   `dls.save` / `load_dls` (ddpsafe.patches.learner), `atomic_save` / `safe_load`.
5. `two_nodes`: two `torch.distributed.run` "nodes" on loopback, each with its own checkpoint folder: plain `torch.load`
   on node 1 finds no file; `safe_load` gives both nodes rank 0's bytes.

Each test counts the outcome of every attempt of both patterns, reports the counts (printed with `-s`, and appended
as a JSON line to `$DDPSAFE_RACE_REPORT` when set), and asserts that the ddpsafe pattern never failed and that the
unguarded pattern failed at least once. Each race runs at a short count by default and at its full count as a test
marked slow:

    python -m pytest tests/test_races.py -s             # short counts: 10 attempts (3 hanging ones, 5 two-node), ~45 s
    DDPSAFE_FULL=1 pytest tests/test_races.py -s        # also the full counts: 50 attempts (10 hanging ones), ~2 min more
    DDPSAFE_RACE_REPORT=races.jsonl pytest tests/test_races.py -s   # also write the counts as JSON lines

Ranks are forked by `ddpsafe.testing.run_ranks` and joined by a real gloo group; many attempts run inside one
`run_ranks` call, lined up by barriers (only the hanging attempts get processes of their own). The harness turns a
hang into `RanksFailed` naming the ranks that never finished; `pytest.mark.timeout` is a backstop."""
from __future__ import annotations
import os, sys, time, json, shutil, random, signal, subprocess, tempfile
from pathlib import Path
import pytest, torch, torch.distributed as dist
from ddpsafe.dist.collectives import agree
from ddpsafe.files.safe import atomic_save, safe_load, prepare_dir
from ddpsafe.testing import run_ranks, RanksFailed, free_port, wait_until, WaitTimeout
from conftest import counts

HERE = Path(__file__).parent

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-race-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)

def delays(n:int, lo:float=0.05, hi:float=0.2, seed:int=0) -> list:
    "`n` writer delays, in seconds, reproducible"
    rng = random.Random(seed)
    return [rng.uniform(lo, hi) for _ in range(n)]

def per_attempt(res:list) -> list:
    "Every rank's outcome lists, zipped into one outcome per attempt: the first failure of any rank, or `None`"
    return [next((o for o in os_ if o is not None), None) for os_ in zip(*res)]

def run_loop(f, n_ranks:int, *args, each:float=2.0, n:int=1) -> list:
    "Run the attempt loop `f` on `n_ranks` ranks; hangs and crashes fail the test, naming the ranks"
    return run_ranks(f, n_ranks, args=args, timeout=30 + each*n)

# ---------------------------------------------------------------------------------------------------------------
# 1. Readers that do not wait for a slow writer

def state(i:int, size:int=1000) -> dict: return {'step': torch.tensor(i), 'w': torch.full((size,), float(i))}

def check(sd, i:int) -> str|None:
    "`None` if `sd` is attempt `i`'s state, else what is wrong with it"
    if int(sd['step']) != i: return 'stale'
    if not bool((sd['w'] == i).all()): return 'torn'
    return None

def slow_writer(folder, waits, guarded):
    f, r, out = Path(folder)/'model.pth', dist.get_rank(), []
    for i, wait in enumerate(waits):
        dist.barrier()
        if guarded:
            if r == 0: time.sleep(wait)
            atomic_save(state(i), f)
            try: out.append(check(safe_load(f), i))
            except Exception as e: out.append(type(e).__name__)
        elif r == 0:
            time.sleep(wait); torch.save(state(i), f); out.append(None)
        else:
            try: out.append(check(torch.load(f), i))
            except Exception as e: out.append(type(e).__name__)
    return out

@pytest.mark.timeout(300)
@pytest.mark.parametrize('n', counts(10))
def test_slow_writer(folder, report_race, n):
    waits = delays(n)
    (folder/'u').mkdir(); (folder/'g').mkdir()
    unguarded = per_attempt(run_loop(slow_writer, 2, folder/'u', waits, False, n=n))
    guarded = per_attempt(run_loop(slow_writer, 2, folder/'g', waits, True, n=n))
    rec = report_race('slow_writer', unguarded, guarded,
                      what='rank 0 saves 50-200 ms late; rank 1 loads: torch.save/torch.load vs atomic_save/safe_load')
    u, g = rec['unguarded_failures'], rec['ddpsafe_failures']
    assert g == 0, f'ddpsafe atomic_save + safe_load failed {g}/{n}: {guarded}'
    assert u >= 1, f'the unguarded slow-writer race did not reproduce in {n} attempts'

# ---------------------------------------------------------------------------------------------------------------
# 2. Every rank removing and re-creating the run folder

def populate(d:Path, n_sub:int=10, n_files:int=20):
    "A run folder with subfolders and files in it, so that `rmtree` takes a while"
    for s in range(n_sub):
        (d/f'sub{s}').mkdir(parents=True, exist_ok=True)
        for k in range(n_files): (d/f'sub{s}'/f'f{k}.txt').write_text('x'*100)

def overwrite_dir(folder, n, guarded):
    d, r, out = Path(folder)/'run', dist.get_rank(), []
    for i in range(n):
        if r == 0: populate(d)
        dist.barrier()
        err = None
        try:
            if guarded: prepare_dir(d, overwrite=True)
            else:
                if d.exists(): shutil.rmtree(d)
                os.makedirs(d, exist_ok=True)
            (d/f'rank{r}.log').write_text(f'attempt {i}')
        except Exception as e: err = type(e).__name__
        dist.barrier()
        if err is None and r == 0:
            logs = sorted(p.name for p in d.glob('rank*.log'))
            if len(logs) != dist.get_world_size(): err = 'lost files'
        out.append(err)
        dist.barrier()
    return out

@pytest.mark.timeout(300)
@pytest.mark.parametrize('n', counts(10))
def test_overwrite_dir(folder, report_race, n):
    ranks = 4
    unguarded = per_attempt(run_loop(overwrite_dir, ranks, folder/'u', n, False, n=n))
    guarded = per_attempt(run_loop(overwrite_dir, ranks, folder/'g', n, True, n=n))
    rec = report_race('overwrite_dir', unguarded, guarded,
                      what=f'{ranks} ranks each rmtree + makedirs the run folder vs prepare_dir(overwrite=True)')
    u, g = rec['unguarded_failures'], rec['ddpsafe_failures']
    assert g == 0, f'prepare_dir(overwrite=True) failed {g}/{n}: {guarded}'
    assert u >= 1, f'the unguarded rmtree/makedirs race did not reproduce in {n} attempts'

# ---------------------------------------------------------------------------------------------------------------
# 3. Ranks deciding from their own `os.path.exists`, then taking different paths around a collective

def exists_unguarded(folder, wait):
    "One attempt: like fastai's `Learner.load`, only the ranks that see the checkpoint load it and wait at a barrier"
    f, t = Path(folder)/'best.pth', torch.ones(4)
    if dist.get_rank() == 0: time.sleep(wait); torch.save(state(1), f)
    if os.path.exists(f):
        torch.load(f); dist.barrier()
    dist.all_reduce(t)                   # the next training step
    return t.tolist()

def exists_guarded(folder, waits):
    "Many attempts: rank 0's view of the file decides for every rank"
    out, t = [], torch.ones(4)
    for i, wait in enumerate(waits):
        f, save = Path(folder)/f'best-{i}.pth', i % 3 != 2   # some epochs have no new best: both paths are taken
        if save:
            if dist.get_rank() == 0: time.sleep(wait)
            atomic_save(state(i), f)
        problem = None
        if seen := agree(os.path.exists(f)):
            problem = check(safe_load(f), i); dist.barrier()
        dist.all_reduce(t)
        out.append((seen, problem))
    return out

@pytest.mark.timeout(600)
@pytest.mark.parametrize('n', counts(10))
def test_exists_decision(folder, report_race, n):
    nu = max(3, n//5)                    # a hang costs its timeout: fewer unguarded attempts
    waits = delays(max(nu, n), seed=3)
    unguarded, hangs = [], []
    for i in range(nu):                  # a hang kills the ranks: one `run_ranks` per attempt
        d = folder/f'u{i}'; d.mkdir()
        try: run_ranks(exists_unguarded, 2, args=(d, waits[i]), timeout=4, grace=2); unguarded.append(None)
        except RanksFailed as e:
            if e.missing: hangs.append(e.missing); unguarded.append('hang')
            else: unguarded.append(str(e).splitlines()[0][:200])
    (folder/'g').mkdir()
    want = [(i % 3 != 2, None) for i in range(n)]                     # every rank took rank 0's path, loaded the right file
    try:
        done = run_ranks(exists_guarded, 2, args=(folder/'g', waits[:n]), timeout=30 + 2*n)
        guarded, hung = [None if a == b == w else f'rank 0 {a}, rank 1 {b}' for a, b, w in zip(*done, want)], []
    except RanksFailed as e: guarded, hung = ['hang']*n, e.missing   # a hang ends the whole loop: every attempt failed
    rec = report_race('exists_hang', unguarded, guarded,
                      what='ranks that see the file barrier, the others all_reduce: own os.path.exists vs agree(os.path.exists)',
                      unguarded_missing_ranks=hangs, ddpsafe_missing_ranks=hung)
    assert rec['ddpsafe_failures'] == 0, f'agree(os.path.exists(f)) + safe_load hung or failed: {rec["ddpsafe_kinds"]} (ranks that did not finish: {hung})'
    assert hangs, f'the unguarded exists race did not hang in {nu} attempts: {rec["unguarded_kinds"]}'

# ---------------------------------------------------------------------------------------------------------------
# 4. Every rank saving the same file at once, then loading it: fastai `DataLoaders` (`dls.save` / `load_dls`
#    from `ddpsafe.patches.learner`), and a plain state dict (`atomic_save` / `safe_load`)

BIG = 1 << 20                            # 4 MB of float32
DRIFT = 0.01                             # ranks reach the save up to 10 ms apart, as they do in training

def big_dls(i:int, path):
    "fastai `DataLoaders` of 4 MB of tensors, every value `i`"
    from torch.utils.data import TensorDataset
    from fastai.data.core import DataLoaders
    x, y = torch.full((BIG//4, 4), float(i)), torch.full((BIG//4,), float(i))
    return DataLoaders.from_dsets(TensorDataset(x, y), TensorDataset(x[:8], y[:8]), bs=64, device='cpu', path=path)

def check_dls(dls, i:int) -> str|None:
    "`None` if `dls` is attempt `i`'s `DataLoaders`, else what is wrong with it"
    x, y = dls.train_ds.tensors
    return None if x.shape == (BIG//4, 4) and bool((x == i).all()) and bool((y == i).all()) else 'torn'

def same_file(folder, n, guarded, kind):
    from ddpsafe.patches.learner import load_dls
    f, out = Path(folder)/'state.pth', []
    rng = random.Random(dist.get_rank())
    for i in range(n):
        obj = big_dls(i, folder) if kind == 'dls' else state(i, BIG)
        dist.barrier()
        time.sleep(rng.uniform(0, DRIFT))
        try:
            if kind == 'dls':
                if guarded: out.append(check_dls(load_dls(obj.save(f.name)), i))
                else: torch.save(obj, f); out.append(check_dls(torch.load(f, weights_only=False), i))
            else:
                if guarded: atomic_save(obj, f); out.append(check(safe_load(f), i))
                else: torch.save(obj, f); out.append(check(torch.load(f), i))
        except Exception as e: out.append(type(e).__name__)
    return out

@pytest.mark.timeout(300)
@pytest.mark.parametrize('n', counts(10))
@pytest.mark.parametrize('kind', ['dls', 'state_dict'])
def test_same_file(folder, report_race, kind, n):
    import ddpsafe.patches.learner               # noqa: F401  (patches fastai: `DataLoaders.save`); fail here if it is broken
    ranks = 4
    (folder/'u').mkdir(); (folder/'g').mkdir()
    unguarded = per_attempt(run_loop(same_file, ranks, folder/'u', n, False, kind, n=n))
    guarded = per_attempt(run_loop(same_file, ranks, folder/'g', n, True, kind, n=n))
    how = ('torch.save(dls) vs dls.save/load_dls' if kind == 'dls' else 'torch.save vs atomic_save/safe_load')
    rec = report_race(f'same_file_{kind}', unguarded, guarded, what=f'{ranks} ranks save the same 4 MB file, then load it: {how}')
    u, g = rec['unguarded_failures'], rec['ddpsafe_failures']
    assert g == 0, f'the ddpsafe save/load of {kind} failed {g}/{n}: {guarded}'
    assert u >= 1, f'the unguarded same-file race ({kind}) did not reproduce in {n} attempts'

# ---------------------------------------------------------------------------------------------------------------
# 5. Two nodes on loopback, each with its own checkpoint folder

def launch_nodes(mode:str, n:int, root:Path, timeout:float=120) -> list:
    "Start two `torch.distributed.run` 'nodes' of one rank each; every node's output. Kills both on timeout"
    port, procs, logs = free_port(), [], []
    for node in range(2):
        (root/f'node{node}').mkdir(parents=True, exist_ok=True)
        log = open(root/f'node{node}.log', 'w+')
        cmd = [sys.executable, '-m', 'torch.distributed.run', '--nnodes', '2', '--nproc_per_node', '1',
               '--node_rank', str(node), '--master_addr', '127.0.0.1', '--master_port', str(port),
               '--max_restarts', '0', str(HERE/'scripts'/'two_node.py'), mode, str(n)]
        env = {**os.environ, 'DDPSAFE_NODE_DIR': str(root/f'node{node}'), 'OMP_NUM_THREADS': '1', 'DDPSAFE_TIMEOUT': '60'}
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                      start_new_session=True))
        logs.append(log)
    running = lambda: [k for k,p in enumerate(procs) if p.poll() is None]
    try: wait_until(lambda: not running(), timeout, f'both {mode} nodes to finish', every=0.1)
    except WaitTimeout: pass
    hung = running()
    for p in procs:
        if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    outs = []
    for log in logs: log.seek(0); outs.append(log.read()); log.close()
    if hung: pytest.fail(f'{mode}: node(s) {hung} did not finish within {timeout:.0f}s and were killed\n'
                         + '\n'.join(f'--- node {k}:\n{o[-3000:]}' for k,o in enumerate(outs)))
    bad = [k for k,p in enumerate(procs) if p.returncode]
    if bad: pytest.fail(f'{mode}: node(s) {bad} exited with {[procs[k].returncode for k in bad]}\n'
                        + '\n'.join(f'--- node {k}:\n{o[-3000:]}' for k,o in enumerate(outs)))
    return [[json.loads(l[len('RESULT '):]) for l in o.splitlines() if l.startswith('RESULT ')] for o in outs]

@pytest.mark.timeout(400)
@pytest.mark.parametrize('n', counts(5))
def test_two_nodes(folder, report_race, n):
    ung = launch_nodes('unguarded', n, folder/'u')
    gua = launch_nodes('ddpsafe', n, folder/'g')
    for res in (ung, gua): assert [len(o) for o in res] == [n, n], f'missing results: {res}'
    # node 0 reads its own file either way; the question is node 1, whose disk never gets the file
    unguarded = [r.get('error', 'wrong contents') if not r['ok'] or r['digest'] != r['expected'] else None for r in ung[1]]
    guarded = [None if a['ok'] and b['ok'] and a['digest'] == b['digest'] == a['expected'] else 'differed or failed' for a, b in zip(*gua)]
    rec = report_race('two_nodes', unguarded, guarded, what='2 torchrun nodes on loopback, node-local folders; failures counted on node 1',
                      node1_has_file=any(r['file_here'] for r in gua[1]))
    assert rec['ddpsafe_failures'] == 0, f'safe_load differed or failed across nodes: {[(a, b) for a, b, o in zip(*gua, guarded) if o]}'
    assert all(r['file_here'] for r in gua[0]) and not any(r['file_here'] for r in gua[1]), \
        'node 1 must get rank 0\'s bytes over the process group, not from a file on its own disk'
    assert unguarded == ['FileNotFoundError']*n, f'unguarded torch.load on node 1 should fail with FileNotFoundError: {ung[1]}'
