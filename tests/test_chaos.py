"""Chaos (issue 61): faults at random moments, the checkpoint writer process among their targets, through the real
callback under `torchrun`; nothing committed or sealed is ever lost, and every run ends bit for bit as an uninterrupted one.

Each seed trains `tests/scripts/launcher_train.py` on 2 gloo ranks (DataLoader workers, async disk saves every 4 steps, the
memory tier every step) to its end, through as many launches as it takes, while one fault at a time lands after a
random number of steps:

- `writer`: SIGKILL to rank 0's writer process. The fit goes on, saving synchronously.
- `stop`: SIGSTOP to the writer, left so (alive, writing nothing): named after `DDPSAFE_WRITER_STALL` (3 s), ended, the fit goes on.
- `trainer`: SIGKILL to a random rank. The job ends; the next launch resumes.
- `term`: SIGTERM to `torchrun` itself (a preemption): a checkpoint at a step boundary, then the next launch resumes.

After a launch that ended early, the old writer is waited for, and the next launch must resume from the newest step then
committed to disk or sealed in memory, never an older one (a lost checkpoint), and every checkpoint on disk verifies.

    python -m pytest tests/test_chaos.py -s                   # 1 seed
    DDPSAFE_FULL=1 python -m pytest tests/test_chaos.py -s    # also 10 seeds, marked slow (CI skips it)
    DDPSAFE_SEED=7 ...                                         # other seeds"""
from __future__ import annotations
import os, re, random, signal, time
from pathlib import Path
import pytest
from ddpsafe.testing import wait_until, WaitTimeout
from ddpsafe.storage.manifest import checkpoints, checkpoint_step, newest_complete, check_checkpoint
from ddpsafe.storage.commit import temporaries
from ddpsafe.write.slots import sealed_slots, previous_writer
from conftest import final_weights, same_weights, Launch, report, torchrun_cmd, needs_torchrun, full_run, ROOT

SCRIPT = ROOT/'tests'/'scripts'/'launcher_train.py'
SEED = int(os.environ.get('DDPSAFE_SEED', '0'))
N_EPOCH, DISK_EVERY, MAX_LAUNCHES = 4, 4, 16
C10D = ['--rdzv-backend', 'c10d', '--rdzv-endpoint', 'localhost:0']
ENV = dict(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, DDPSAFE_WRITER_STALL=3)

def train_args(run:Path, *extra) -> list:
    return [str(SCRIPT), str(run), str(N_EPOCH), '--every-steps', str(DISK_EVERY), '--slow', '0.15', '--workers', '1',
            '--marks', str(run/'marks'), '--out', str(run/'w'), *extra]

@pytest.fixture(scope='module')
def baseline(tools, tmp_path_factory) -> list:
    "The final weights of an uninterrupted run: synchronous saves, no memory tier"
    run = tmp_path_factory.mktemp('chaos')/'baseline'
    l = Launch(torchrun_cmd(*C10D) + train_args(run), run, tools, 'baseline', **ENV)
    assert l.wait(240) == 0, l.output()[-4000:]
    return final_weights(run)

def newest_held(run:Path) -> int:
    "The newest step committed to disk or sealed in rank 0's memory tier: what the next launch must resume from"
    disk = newest_complete(run/'checkpoints')
    sealed = [s for s, _ in sealed_slots(run/'mem'/'rank-0')]
    return max(([checkpoint_step(disk)] if disk else []) + sealed[-1:], default=0)

def strike(l:Launch, run:Path, rng:random.Random, after:int) -> str|None:
    "After `after` more steps of launch `l`, one fault; what it was (`None`: the launch ended first)"
    steps = lambda: sum(1 for s in l.saves(0) if s[1] == 'memory')
    goal = steps() + after
    try: wait_until(lambda: steps() >= goal or l.proc.poll() is not None, 180, f'{after} more steps', rank=0, every=0.01)
    except WaitTimeout as e: l.kill(); pytest.fail(f'{l.name}: {e}\n{l.output()[-4000:]}')
    if l.proc.poll() is not None: return None
    time.sleep(rng.uniform(0, 0.15))                      # anywhere in the step: the copy, the seal, the write, the sleep
    writer = previous_writer(run/'mem'/'rank-0')
    kinds = ['trainer', 'term'] + (['writer', 'writer', 'stop'] if writer else [])
    kind = rng.choice(kinds)
    try:
        if kind == 'writer': os.kill(writer, signal.SIGKILL)
        elif kind == 'stop': os.kill(writer, signal.SIGSTOP)
        elif kind == 'trainer': os.kill(l.pid(rng.randrange(2)), signal.SIGKILL)
        else: os.kill(l.proc.pid, signal.SIGTERM)
    except (ProcessLookupError, TypeError): return None    # it ended meanwhile
    return kind

def chaos_run(tools, run:Path, seed:int) -> dict:
    "One training to its end through faults at random moments; what happened"
    rng, faults, resumes = random.Random(seed), [], []
    args = train_args(run, '--async-save', '--memory-every-steps', '1', '--memory-path', str(run/'mem'))
    for k in range(MAX_LAUNCHES):
        l = Launch(torchrun_cmd(*C10D) + args, run, tools, f'seed{seed}-{k}', **ENV)
        while (kind := strike(l, run, rng, rng.randint(1, 4))) in ('writer', 'stop'): faults.append(kind)
        if kind: faults.append(kind)
        code, out = l.wait(240), l.output()
        if kind is None:
            assert code == 0 and [r and r['code'] for r in l.results()] == [0, 0], f'{l.name}: exit {code}, {l.results()}\n{out[-5000:]}'
            return dict(faults=faults, resumes=resumes, launches=k + 1)
        try: wait_until(lambda: previous_writer(run/'mem'/'rank-0') is None, 120, 'the old writer to end', rank=0)
        except WaitTimeout as e: pytest.fail(f'{l.name}: {e}')
        bad = [(p.name, e) for p in checkpoints(run/'checkpoints') if (e := check_checkpoint(p))]
        assert not bad, f'{l.name}: after a {kind} fault, checkpoints that do not verify: {bad}'
        resumes.append(newest_held(run))
    pytest.fail(f'seed {seed}: not finished after {MAX_LAUNCHES} launches (faults {faults})')

def check_resumes(run:Path, seed:int, result:dict):
    "Each launch after the first resumed from the newest step held when the one before it ended"
    for k, held in enumerate(result['resumes'], 1):
        out = (run.parent/f'{run.name}-seed{seed}-{k}.out').read_text(errors='replace')
        said = [int(s) for s in re.findall(r'(?:resumed from|this fit already finished in) \S+/step-(\d+) ', out)]
        assert said[:1] == [held] if held else said == [], f'seed {seed}, launch {k}: resumed from {said}, the newest held was {held} (lost)\n{out[-4000:]}'

@needs_torchrun
@pytest.mark.timeout(900)
@pytest.mark.parametrize('seeds', [pytest.param(1, id='seeds1'), pytest.param(10, marks=[pytest.mark.slow, pytest.mark.timeout(5400)], id='seeds10')])
def test_chaos(tools, tmp_path, baseline, seeds):
    "Random faults (the writer killed or stopped, a rank killed, torchrun preempted): nothing lost, every run bit-identical"
    results = []
    for seed in range(SEED, SEED + seeds):
        run = tmp_path/f'seed{seed}'
        r = chaos_run(tools, run, seed)
        check_resumes(run, seed, r)
        assert temporaries(run/'checkpoints') == [], temporaries(run/'checkpoints')
        same = all(same_weights(a, b) for a, b in zip(final_weights(run), baseline))
        results.append(dict(seed=seed, **r, same=same))
        report(chaos=seed, faults=r['faults'], launches=r['launches'], resumed_at=r['resumes'], bit_identical=same)
        assert same, f'seed {seed}: after faults {r["faults"]}, the final weights differ from the uninterrupted run'
    n = sum(len(r['faults']) for r in results)
    kinds = ', '.join(f'{k} {sum(r["faults"].count(k) for r in results)}' for k in ('writer', 'stop', 'trainer', 'term'))
    print(f'\n[chaos] {seeds} seeds, {n} faults ({kinds}), '
          f'{sum(r["launches"] for r in results)} launches: 0 lost, {sum(r["same"] for r in results)}/{seeds} bit-identical')
    if seeds >= 10: assert n >= 50, f'{n} faults in {seeds} seeds: the chaos test promises at least 50'
