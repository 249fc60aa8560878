"""Shared by the test files: the slow switch, attempt counts, race reports, and small tmpfs mounts.

Tests marked `@pytest.mark.slow` are the long stress runs (full attempt counts, 4 ranks on 2 cores, more stop
points); they are skipped unless `DDPSAFE_FULL=1` is set or `-m` selects them. Every other test runs by default, with
its short count:

    bash tools/test.sh                              # the default: short counts (what CI runs)
    DDPSAFE_FULL=1 bash tools/test.sh               # also every test marked slow (CI: DDPSAFE_FULL=1 bash .ci/run)
    python -m pytest tests -m slow                  # only the slow ones

`DDPSAFE_RACE_REPORT=path` appends one JSON line per race to `path`."""
from __future__ import annotations
import os, sys, json, time, shutil, signal, tempfile, subprocess, importlib.util
from pathlib import Path
import pytest
from ddpsafe.testing import wait_until, WaitTimeout

def full_run() -> bool:
    "Is `DDPSAFE_FULL` set?"
    return os.environ.get('DDPSAFE_FULL', '').strip().lower() not in ('', '0', 'false', 'no')

def pytest_collection_modifyitems(config, items):
    "Skip the tests marked slow, unless `DDPSAFE_FULL=1` or `-m` selects them"
    if full_run() or 'slow' in (config.getoption('markexpr') or ''): return
    skip = pytest.mark.skip(reason='slow stress run: DDPSAFE_FULL=1 (or -m slow) runs it')
    for item in items:
        if item.get_closest_marker('slow'): item.add_marker(skip)

def _shm_runs() -> set:
    "The runs' folders in /dev/shm (slots, memory tiers) on this machine now"
    from ddpsafe.write.slots import slots_home
    return set(slots_home().glob('ddpsafe-*'))

def _in_use(folder:Path) -> bool:
    "Does a live process (a trainer that sealed a slot, a writer) still own `folder`?"
    for f in [*folder.rglob('sealed.json'), *folder.rglob('writer.json')]:
        try: os.kill(int(json.loads(f.read_text())['pid']), 0); return True
        except PermissionError: return True
        except (OSError, ValueError, KeyError, TypeError): pass
    return False

def pytest_sessionstart(session): session.config._shm_before = _shm_runs()

def pytest_sessionfinish(session):
    """What the tests' killed fits left in /dev/shm removed: sealed slots kept for a next launch that never comes hold this
    machine's RAM. On the controller alone, after every worker; a folder that was there before, or a live process owns, stays"""
    if hasattr(session.config, 'workerinput') or not hasattr(session.config, '_shm_before'): return
    if os.environ.get('DDPSAFE_NESTED_TESTS'): return   # a test's own pytest run: the outer session's tests may still be between a kill and its relaunch
    for d in _shm_runs() - session.config._shm_before:
        if not _in_use(d): shutil.rmtree(d, ignore_errors=True)

def counts(short:int,                # Attempts run by default
           full:int=50,              # Attempts of the slow run
           timeout:float|None=None,  # `pytest.mark.timeout` of the slow run, if it needs its own
           name:str='n') -> list:    # How the test ids name the count
    "Two `parametrize` values: `short`, and `full` marked slow"
    marks = [pytest.mark.slow] + ([pytest.mark.timeout(timeout)] if timeout else [])
    return [pytest.param(short, id=f'{name}{short}'), pytest.param(full, marks=marks, id=f'{name}{full}')]

def fail_msg(outs) -> str:
    "Every rank's output (the last 4000 characters), for an assertion message"
    return '\n'.join(f'--- rank {r}:\n{o[-4000:]}' for r, o in enumerate(outs))

def train_ckpt():
    "tests/scripts/train_ckpt.py as a module, one per session"
    name = 'ddpsafe_train_ckpt'
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent/'scripts'/'train_ckpt.py')
        m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m)
    return sys.modules[name]

def batches(n:int) -> tuple:
    """(batches each of `n` ranks trains in an epoch, fastai's `len` of its loader): 48 items in batches of 8, `drop_last`.
    fastai's `DistributedDL.__len__` rounds the base loader's 6 batches up to a multiple of `n` and ignores `drop_last`,
    so on 4 ranks it says 2 while each rank's 12 items make 1 whole batch"""
    return (48 // n) // 8, -(-6 // n)

def same_tree(a, b) -> bool:
    "Are two nested state dicts equal, tensors bit for bit?"
    import torch
    if isinstance(a, torch.Tensor): return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict): return isinstance(b, dict) and a.keys() == b.keys() and all(same_tree(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)): return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same_tree, a, b))
    return a == b

def saved_state(ck) -> tuple:
    "(weights, optimizer state) of checkpoint `ck`, whole tensors, whether it holds them whole or in shards"
    import torch
    from ddpsafe.patches.learner import fastai_safe_globals
    from ddpsafe.cli import saved_weights
    from ddpsafe.state.sharded import fill_placeholders, read_whole_shards
    from ddpsafe.storage.manifest import SHARD_INDEX, read_manifest
    with torch.serialization.safe_globals(fastai_safe_globals()): opt = torch.load(ck/'optimizer.pt', weights_only=True)
    return saved_weights(ck), fill_placeholders(opt, read_whole_shards(ck) if SHARD_INDEX in read_manifest(ck)['files'] else {})

def resumed_on(folder, n_epoch:int, n:int, *args, saved_by:int=2) -> tuple:
    """Resume the newest checkpoint in `folder/checkpoints` (saved by `saved_by` ranks) with `train_ckpt.py` on `n` ranks to
    the end: (codes, outs, results). Every rank must start from exactly its weights and optimizer state, and end with the
    same weights as the others"""
    import torch
    from ddpsafe.storage.manifest import newest_complete
    ck = newest_complete(folder/'checkpoints')
    weights, opt = saved_state(ck)                        # read now: rotation removes `ck` before the run ends
    tc = train_ckpt()
    codes, outs, res = tc.run(folder, n_epoch, *args, '--start-out', folder/'start', '--out', folder/'w', n=n, timeout=300)
    assert codes == [0]*n, f'exit codes {codes}\n' + fail_msg(outs)
    for r in range(n):
        start = torch.load(f'{folder}/start.rank{r}', weights_only=False)      # written by the test script
        assert tc.same(start['model'], weights), f'rank {r} did not start from the weights in {ck}'
        assert same_tree(start['opt'], opt), f'rank {r} did not start from the optimizer state in {ck}'
    final = tc.weights(folder/'w', n)
    assert all(tc.same(w, final[0]) for w in final), 'the ranks ended with different weights'
    if n != saved_by: assert f'{ck} was saved by {saved_by} ranks and this run has {n}' in outs[0], outs[0][-3000:]
    return codes, outs, res

def tally(outcomes:list) -> dict:
    "How many of each failure in `outcomes`"
    res = {}
    for o in outcomes:
        if o is not None: res[str(o)] = res.get(str(o), 0) + 1
    return res

def report_race(race:str,        # What races, in a few words
                unguarded:list,  # One outcome per attempt of the unguarded pattern: `None` if it went right, else what went wrong
                guarded:list,    # The same for ddpsafe's pattern
                **details) -> dict:
    "Print a race's measured counts; append them to `$DDPSAFE_RACE_REPORT`"
    u, g = sum(o is not None for o in unguarded), sum(o is not None for o in guarded)
    rec = dict(race=race, unguarded_attempts=len(unguarded), unguarded_failures=u, unguarded_kinds=tally(unguarded),
               ddpsafe_attempts=len(guarded), ddpsafe_failures=g, ddpsafe_kinds=tally(guarded), full=full_run(), **details)
    print(f'\n[race] {race}: unguarded failed {u}/{len(unguarded)} {tally(unguarded)}, ddpsafe failed {g}/{len(guarded)}'
          + (f' {tally(guarded)}' if g else '') + ''.join(f'; {k}={v}' for k,v in details.items()))
    if dest := os.environ.get('DDPSAFE_RACE_REPORT'):
        with open(dest, 'a') as f: f.write(json.dumps(rec, default=str) + '\n')
    return rec

@pytest.fixture(name='report_race')
def report_race_fixture():
    "The `report_race` function"
    return report_race

@pytest.fixture
def tmpfs():
    "`tmpfs(size)`: a new tmpfs of `size` (`'16m'`), unmounted after the test"
    mounted = []
    def mount(size:str='16m') -> Path:
        d = Path(tempfile.mkdtemp(prefix='ddpsafe-tmpfs-'))
        r = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(d)], capture_output=True, text=True)
        if r.returncode:
            d.rmdir()
            pytest.fail(f'could not mount a {size} tmpfs at {d} ({r.stderr.strip() or f"mount exited {r.returncode}"}): this test '
                        'needs a real small filesystem (a full disk, a read-only remount); run it as root or with CAP_SYS_ADMIN',
                        pytrace=False)
        mounted.append(d)
        return d
    yield mount
    for d in mounted:
        subprocess.run(['umount', '-l', str(d)], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)

@pytest.fixture
def stopwatch():
    "Seconds since the test started, as a function"
    t0 = time.monotonic()
    return lambda: round(time.monotonic() - t0, 2)

# ---- jobs of tests/scripts/failing_train.py (test_failures.py, test_hangs.py)

def _alive(pid:int) -> bool:
    "Is `pid` in the process table, and not a zombie?"
    try: return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z'
    except (FileNotFoundError, ProcessLookupError): return False

def run_job(run:Path, *args, ranks:int=1, env:dict|None=None, limit:float=90, torchrun_args=()) -> tuple:
    """`tests/scripts/failing_train.py RUN *args`, in one process or under torchrun on `ranks` ranks (with `torchrun_args`),
    with the default `DDPSAFE_TIMEOUT` unless `env` sets it: (exit code, seconds, output, pids left alive). A job still
    running after `limit` seconds is killed, and the test fails naming the ranks and DataLoader workers still alive"""
    script, torchrun = Path(__file__).parent/'scripts'/'failing_train.py', Path(sys.executable).parent/'torchrun'
    cmd = ([str(torchrun), '--nproc_per_node', str(ranks), *torchrun_args] if ranks > 1 else [sys.executable]) + [str(script), str(run), *map(str, args)]
    env = {**{k: v for k, v in os.environ.items() if k != 'DDPSAFE_TIMEOUT'}, **(env or {})}   # by default, 30 minutes
    t0 = time.monotonic()
    with open(run.parent/f'{run.name}.out', 'w') as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**env, 'OMP_NUM_THREADS': '1'})
        try: code = proc.wait(limit)
        except subprocess.TimeoutExpired: code = None
    secs, output = time.monotonic() - t0, (run.parent/f'{run.name}.out').read_text()
    left = left_behind(run)
    if code is None:
        kill_all(run, proc)
        pytest.fail(f'the job did not end within {limit:g}s; still alive: {left}\n{output[-4000:]}')
    print(f'{run.name}: exit {code} after {secs:.1f}s')
    return code, secs, output, left

def left_behind(run:Path) -> list:
    "The ranks and DataLoader workers of the job still alive, as 'pid (rank r)'"
    return [f"{p.name} ({p.read_text()})" for p in sorted((run/'pids').glob('*')) if _alive(int(p.name))]

def kill_all(run:Path, proc):
    for p in (run/'pids').glob('*'):
        try: os.kill(int(p.name), signal.SIGKILL)
        except ProcessLookupError: pass
    try: os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError: pass
    proc.wait()

# ---------------------------------------------------------------------------------------------------------------
# Launching a job as a scheduler does (test_launchers, test_apps, test_own_loaders, test_text): the launcher, its
# environment, `ddpsafe-status` (the console script when installed; until then a stand-in that reads the manifest the same way)

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TORCHRUN, ACCELERATE = BIN/'torchrun', BIN/'accelerate'
needs_torchrun = pytest.mark.skipif(not TORCHRUN.exists(), reason='no torchrun next to this python')
needs_accelerate = pytest.mark.skipif(not ACCELERATE.exists(), reason='no accelerate next to this python')

STATUS_SHIM = '''#!{python}
"""Stand-in for ddpsafe-status (tests only, used while the console script is not installed): the same function"""
import sys
from ddpsafe.cli import run_status
s = run_status(sys.argv[1])
print(f"{s['state']}: {s['checkpoint']}")
sys.exit(s['exit_code'])
'''

@pytest.fixture(scope='module')
def tools(tmp_path_factory):
    "A PATH with this venv's binaries, `ddpsafe-status` (the real one, else the stand-in), and stub `srun`/`scontrol`"
    d = tmp_path_factory.mktemp('bin')
    if not (BIN/'ddpsafe-status').exists():
        (d/'ddpsafe-status').write_text(STATUS_SHIM.replace('{python}', sys.executable))
    (d/'srun').write_text('#!/bin/sh\n# stub: run the step here, in the foreground of this shell\nexec "$@"\n')
    (d/'scontrol').write_text('#!/bin/sh\n# stub: record the call\necho "scontrol $*" >> "$SCONTROL_LOG"\n')
    for f in d.iterdir(): f.chmod(0o755)
    return dict(PATH=f'{d}:{BIN}:{os.environ.get("PATH", "")}', real_status=(BIN/'ddpsafe-status').exists())

def env(tools, **extra) -> dict:
    return {**os.environ, 'PATH': tools['PATH'], 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', 'DDPSAFE_TIMEOUT': '60',
            **{k: str(v) for k, v in extra.items()}}

def status(tools, ckpt) -> int:
    "`ddpsafe-status ckpt`'s exit code"
    return subprocess.run(['ddpsafe-status', str(ckpt)], env=env(tools), capture_output=True, timeout=60).returncode

def status_line(tools, ckpt) -> str:
    "What `ddpsafe-status ckpt` prints"
    return subprocess.run(['ddpsafe-status', str(ckpt)], env=env(tools), capture_output=True, text=True, timeout=60).stdout

def torchrun_cmd(*flags) -> list: return [str(TORCHRUN), '--nproc_per_node', '2', *flags]
def accelerate_cmd() -> list: return [str(ACCELERATE), 'launch', '--multi_gpu', '--num_processes', '2', '--num_machines', '1',
                                      '--mixed_precision', 'no', '--dynamo_backend', 'no']

def final_weights(run:Path, n:int=2) -> list:
    "Each rank's final weights, as `tests/scripts/launcher_train.py --out run/w` saved them"
    import torch
    return [torch.load(f'{run}/w.rank{r}', weights_only=True) for r in range(n)]

def same_weights(a:dict, b:dict) -> bool:
    "Are two state dicts equal, tensor for tensor, bit for bit?"
    import torch
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

class Launch:
    "A launcher command started in a session of its own (as a scheduler starts a job), with its `n` ranks' marker files"
    def __init__(self, cmd:list, run:Path, tools, name:str, n:int=2, **extra_env):
        self.run, self.name, self.n, self.t0 = Path(run), name, n, time.monotonic()
        self.out = open(self.run.parent/f'{self.run.name}-{name}.out', 'w')
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=env(tools, **extra_env), cwd=self.run.parent)
    def marks(self, r:int) -> list:
        try: return (self.run/'marks'/f'rank{r}.log').read_text().splitlines()
        except FileNotFoundError: return []
    def pid(self, r:int) -> int|None:
        pids = [int(l.split()[1]) for l in self.marks(r) if l.startswith('PID ')]
        return pids[-1] if pids else None
    def saves(self, r:int) -> list: return [l.split()[1:] for l in self.marks(r) if l.startswith('SAVE ')]
    def results(self) -> list:
        return [next((json.loads(l[7:]) for l in reversed(self.marks(r)) if l.startswith('RESULT ')), None) for r in range(self.n)]
    def output(self) -> str: return (self.run.parent/f'{self.run.name}-{self.name}.out').read_text(errors='replace')

    def wait_saves(self, n:int, timeout:float=120):
        "Wait until rank 0 has logged `n` saves of this launch"
        try: wait_until(lambda: len(self.saves(0)) >= n or self.proc.poll() is not None, timeout, f'{n} saves', rank=0, every=0.02)
        except WaitTimeout: pass
        if len(self.saves(0)) < n:
            pytest.fail(f'{self.name}: rank 0 logged {len(self.saves(0))} saves, not {n} (launcher exit {self.proc.poll()})\n{self.output()[-4000:]}')

    def wait(self, timeout:float=120) -> int:
        "The launcher's exit code; a hang fails the test naming the ranks that reported no result"
        try: code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            missing = [r for r, res in enumerate(self.results()) if res is None]
            self.kill()
            pytest.fail(f'{self.name}: the launcher did not exit within {timeout:.0f}s; ranks without a result: {missing}\n{self.output()[-4000:]}')
        self.seconds = round(time.monotonic() - self.t0, 1)
        return code

    def kill(self):
        "SIGKILL to the launcher's session and to every rank (ranks live in sessions of their own)"
        for r in range(self.n):
            if (p := self.pid(r)):
                try: os.killpg(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError): pass
        try: os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError): pass

def report(**rec):
    print(f'\n[launch] ' + ', '.join(f'{k}={v}' for k, v in rec.items()))
    if dest := os.environ.get('DDPSAFE_LAUNCH_REPORT'):
        with open(dest, 'a') as f: f.write(json.dumps(rec, default=str) + '\n')

