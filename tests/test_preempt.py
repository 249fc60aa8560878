"""Proof (issue 5): preemption. Signals from outside at random moments, SIGKILL in the middle of saves, the switch files,
and a second SIGTERM during the save: every rank stops at the same step with one checkpoint, nothing is ever corrupt,
and resuming ends bit for bit where an uninterrupted run does.

Every run is `tests/scripts/train_ckpt.py` on 2 ranks started like `torchrun` would (`ddpsafe.testing.launch_ranks`);
the test sends the signals with `RankProcs.signal`, timed from the marker lines the script prints (`STEP g`,
`SAVE-BEGIN g reason`), with a harness timeout on every wait and `pytest.mark.timeout` as a backstop.

    python -m pytest tests/test_preempt.py -s                  # short counts: 3 SIGTERM runs, 3 SIGKILL runs, 1 double SIGTERM
    DDPSAFE_FULL=1 python -m pytest tests/test_preempt.py -s   # also the full counts, marked slow: 20, 20, 10
    DDPSAFE_SEED=123 ...                                        # other random moments (the seed is printed)

Runs are chained to save launches: stop, resume and stop again, ..., then resume to the end and compare."""
from __future__ import annotations
import os, sys, time, shutil, random, signal, subprocess, tempfile, statistics, importlib.util
from pathlib import Path
import pytest
from ddpsafe.storage.manifest import checkpoints, checkpoint_step, newest_complete, check_checkpoint, read_manifest, checkpoint_name
from ddpsafe.callback.preempt import POLL_SECONDS, MAX_STEPS_PER_ROUND, REQUEUE_EXIT_CODE

from conftest import train_ckpt, counts, fail_msg
tc = train_ckpt()
BIN = Path(sys.executable).parent
SEED = int(os.environ.get('DDPSAFE_SEED', '0'))
N_EPOCH, STEPS, PER_EPOCH = 4, 12, 3         # the tiny model: 4 epochs of 3 steps per rank
BIG, BIG_EPOCH, BIG_STEPS = ('--model-mb', '16'), 3, 9   # ~16 MB of weights: a checkpoint is ~48 MB, a save takes ~0.2-0.7 s
SLOW = 0.15                                   # seconds each step sleeps, so a signal sent from outside lands between steps

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-preempt-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def waited(procs, r, pattern, timeout=180, count=1):
    "`tc.wait_for`, failing the test with every rank's output (after killing them) when the line never comes"
    if tc.wait_for(procs, r, pattern, timeout, count): return
    procs.kill()
    outs = [procs.output(i) for i in range(procs.n)]
    pytest.fail(f'rank {r} never printed {pattern!r} (x{count})\n' + fail_msg(outs))

def signal_saves(out:str) -> list:
    "The steps this rank saved for a signal"
    return [int(g) for g, why, done, t in tc.markers(out, 'SAVE-END') if why == 'signal' and done == 'saved']

def check_signal_stop(path, codes, outs, res, start:int) -> tuple:
    "Asserts for a run stopped by a signal: exit 75 everywhere, one checkpoint of the same step; (step, manifest)"
    assert codes == [REQUEUE_EXIT_CODE]*2, f'exit codes {codes}\n' + fail_msg(outs)
    steps = [o['steps'] for o in res]
    assert steps[0] == steps[1] and start < steps[0], f'ranks stopped at {steps} (resumed at {start})\n' + fail_msg(outs)
    s = steps[0]
    assert [signal_saves(o) for o in outs] == [[s], [s]], f'signal saves per rank: {[signal_saves(o) for o in outs]}'
    assert outs[0].count('ddpsafe: stopping at step') == 1 and f'ddpsafe: stopping at step {s} after a signal' in outs[0]
    root = path/'checkpoints'
    ck = newest_complete(root)
    assert ck is not None and ck.name == checkpoint_name(s), f'newest complete checkpoint {ck}, the stop was at {s}'
    assert check_checkpoint(ck) == []
    m = read_manifest(ck)
    assert m['reason'] == 'signal' and m['step'] == s
    signalled = [p for p in checkpoints(root) if checkpoint_step(p) > start and read_manifest(p)['reason'] == 'signal']
    assert signalled == [ck], f'checkpoints saved for the signal: {signalled}'
    return s, m

def finish_chain(path, whole, n_epoch, *args, said='ddpsafe: resumed from') -> list:
    "Resume to the end; assert exit 0, rank 0 printing `said`, and bit-identical weights on both ranks; the outputs"
    codes, outs, res = tc.run(path, n_epoch, *args, '--out', path/'w')
    assert codes == [0, 0], f'exit codes {codes}\n' + fail_msg(outs)
    assert said in outs[0], outs[0][-3000:]
    w = tc.weights(path/'w')
    assert all(tc.same(x, whole[0]) for x in w), 'resumed run differs from the uninterrupted one'
    return outs

# ---------------------------------------------------------------------------------------------------------------
# SIGTERM to one random rank at a random moment

@pytest.mark.timeout(600)
@pytest.mark.parametrize('runs', counts(2, 20, timeout=3000, name='runs'))
def test_sigterm_one_random_rank(folder, runs):
    rng = random.Random(SEED)
    whole = tc.baseline(N_EPOCH, '--fit', 'one_cycle')
    stops, chains, done = [], 0, 0
    while done < runs:
        path, start, in_chain = folder/f'chain{chains}', 0, 0
        while done < runs and in_chain < 3 and start <= STEPS - 4:
            k, r, delay = rng.randint(start+1, min(start+2, STEPS-3)), rng.randrange(2), rng.uniform(0.2, 0.8)*SLOW
            procs = tc.launch(path, N_EPOCH, '--slow', SLOW)
            try:
                waited(procs, r, f'STEP {k}')
                time.sleep(delay); procs.signal(r, signal.SIGTERM)
            except BaseException: procs.kill(); raise
            codes, outs, res = tc.finish(procs, 180)
            s, m = check_signal_stop(path, codes, outs, res, start)
            stops.append(dict(rank=r, after_step=k, delay=round(delay, 3), stop=s, epoch=m['epoch'], batch=m['iter'],
                              mid_epoch=m['iter'] < PER_EPOCH))
            start, in_chain, done = s, in_chain + 1, done + 1
        finish_chain(path, whole, N_EPOCH)
        chains += 1
    mid = sum(o['mid_epoch'] for o in stops)
    print(f'\n[SIGTERM] seed {SEED}: {runs}/{runs} runs stopped at the same step on both ranks with one signal checkpoint, '
          f'exit 75 on both; {mid} mid-epoch, {runs-mid} at the last batch of an epoch; {chains} resumed chain(s) bit-identical to '
          f'the uninterrupted run\n  ' + '\n  '.join(map(str, stops)))

# ---------------------------------------------------------------------------------------------------------------
# poll_seconds: rounds of agreement spaced in time; at the default (POLL_SECONDS) one round spans many short steps

DEFAULT_POLL = ('--poll-seconds', str(POLL_SECONDS))   # the script passes 0 (a round every step) unless told otherwise

@pytest.mark.timeout(600)
@pytest.mark.parametrize('accum', [1, 2], ids=['no-accum', 'accum2'])
def test_default_poll_signal_stop_and_resume(folder, accum):
    """At the default `poll_seconds`, SIGTERM to one rank still stops both ranks at one optimizer step with one checkpoint,
    also under fastai's `GradientAccumulation` (the save waits for the window's optimizer step); the resume is bit-identical"""
    n_epoch, train = 20, ('--accum', str(accum))                       # 60 batches of ~10 ms: a round spans up to ~25 of them
    args = (*train, '--slow', '0.01', *DEFAULT_POLL)
    whole = tc.baseline(n_epoch, *train)
    codes, outs, res = tc.run(folder, n_epoch, *args, '--kill', 'SIGTERM:1:6', timeout=180)
    s, m = check_signal_stop(folder, codes, outs, res, 6 // accum)    # after batch 6, where rank 1 was signalled
    batches = m['epoch']*PER_EPOCH + m['iter']                        # training batches done when the checkpoint was taken
    assert batches == s*accum, f'checkpoint of step {s} taken after batch {batches}: not at the end of an accumulation window'
    assert 6 < batches <= 6 + MAX_STEPS_PER_ROUND + accum, f'the stop came {batches - 6} batches after the signal: more than a round and a step'
    finish_chain(folder, whole, n_epoch, *args)
    print(f'\n[poll_seconds={POLL_SECONDS}, accumulation {accum}] SIGTERM to rank 1 after batch 6: both ranks stopped at '
          f'optimizer step {s} (batch {batches}), resumed bit-identical')

@pytest.mark.timeout(600)
@pytest.mark.parametrize('poll_seconds,accum', [('0', 1), (str(POLL_SECONDS), 1), pytest.param(str(POLL_SECONDS), 2, marks=pytest.mark.slow)],   # accumulation's stop: test_default_poll_signal_stop_and_resume[accum2]
                         ids=['every-step', 'default', 'default-accum2'])
def test_signal_in_the_last_round(folder, poll_seconds, accum):
    "SIGTERM to rank 1 after the poll of the last step: agreed at the fit's end, both ranks exit 75, and the rerun ends the run"
    n_epoch, train = 8, ('--accum', str(accum))
    args = (*train, '--slow', '0.01', '--poll-seconds', poll_seconds)
    whole = tc.baseline(n_epoch, *train)
    batches = n_epoch * PER_EPOCH; last = batches // accum             # the last batch ends an accumulation window
    codes, outs, res = tc.run(folder, n_epoch, *args, '--kill', f'SIGTERM:1:{batches}', timeout=180)
    assert codes == [REQUEUE_EXIT_CODE]*2, f'exit codes {codes}: the signal in the last round was not acted on by every rank\n' + fail_msg(outs)
    assert [o['steps'] for o in res] == [last, last], fail_msg(outs)
    assert outs[0].count('ddpsafe: stopping at step') == 1 and f'ddpsafe: stopping at step {last} after a signal' in outs[0], outs[0][-3000:]
    ck = newest_complete(folder/'checkpoints')
    assert ck is not None and ck.name == checkpoint_name(last) and check_checkpoint(ck) == [], ck
    assert read_manifest(ck)['finished'], 'the fit had run to its end: its checkpoint is the finished one'
    outs = finish_chain(folder, whole, n_epoch, *args, said='ddpsafe: this fit already finished')
    assert 'STEP' not in outs[0], 'the rerun of a finished run trained again'
    print(f'\n[poll_seconds={poll_seconds}, accumulation {accum}] SIGTERM to rank 1 after the last batch ({batches}): both ranks '
          f'exited 75 at step {last}; the rerun trained nothing')

@pytest.mark.timeout(300)
def test_every_step_poll_saves_at_the_next_step(folder):
    "`poll_seconds=0`: a round at every step; SIGTERM to rank 1 after step 6 is saved at step 7 on both ranks, the very next boundary"
    codes, outs, res = tc.run(folder, N_EPOCH, '--poll-seconds', '0', '--kill', 'SIGTERM:1:6', timeout=180)
    s, m = check_signal_stop(folder, codes, outs, res, 6)
    assert s == 7, f'stopped at step {s}: with a round at every step, the round of step 6 carries the signal and step 7 acts on it'

# ---------------------------------------------------------------------------------------------------------------
# SIGKILL of rank 0 in the middle of saves

@pytest.mark.timeout(900)
@pytest.mark.parametrize('runs', counts(2, 20, timeout=3000, name='runs'))
def test_sigkill_rank0_during_saves(folder, runs):
    rng = random.Random(SEED + 1)
    whole = tc.baseline(BIG_EPOCH, *BIG)
    durations, kills, chains, done = [0.4], [], 0, 0
    args = (*BIG, '--every-steps', '1', '--keep', '2')
    while done < runs:
        path, start, in_chain, prev, stale = folder/f'chain{chains}', 0, 0, None, []
        root = path/'checkpoints'
        while done < runs and in_chain < 3 and start <= BIG_STEPS - 3:
            j = rng.randint(2 if start == 0 else 1, 2)                # the j-th save of this run: one before it has finished
            delay = rng.uniform(0, 1.2*statistics.median(durations))
            procs = tc.launch(path, BIG_EPOCH, *args)
            try:
                waited(procs, 0, r'SAVE-BEGIN \d+ \w+ [\d.]+', count=j)
                time.sleep(delay); procs.signal(0, signal.SIGKILL); t_kill = time.time()
                time.sleep(0.3)
            finally: procs.kill()                                      # rank 1 waits in a collective for the dead rank 0
            codes, outs, res = tc.finish(procs, 30)
            assert codes[0] == -signal.SIGKILL, codes
            if prev:
                assert f'ddpsafe: resumed from {prev} ' in outs[0], f'did not resume from {prev}\n' + outs[0][-3000:]
                assert not any(p.exists() for p in stale), f'the resume left temporary folders {stale}'  # removed by resume
            begun = {(int(g), why): float(t) for g, why, t in tc.markers(outs[0], 'SAVE-BEGIN')}     # step 3 may save twice:
            ended = {(int(g), why): float(t) for g, why, done_, t in tc.markers(outs[0], 'SAVE-END')}  # 'steps' then 'epoch'
            durations += [ended[g] - begun[g] for g in ended if g in begun and ended[g] > begun[g]]
            in_flight = [g for g, why in begun if (g, why) not in ended or ended[g, why] > t_kill]
            for p in checkpoints(root):                                # a final name is always a complete checkpoint
                assert check_checkpoint(p) == [], f'{p} after SIGKILL: {check_checkpoint(p)}'
            ck = newest_complete(root)
            assert ck is not None and checkpoint_step(ck) >= start, f'the checkpoint resumed from (step {start}) is gone: {ck}'
            temps = sorted(p.name for p in root.glob('.step-*'))
            kills.append(dict(killed_during_save=in_flight[0] if in_flight else None,
                              committed=bool(in_flight) and checkpoint_step(ck) == in_flight[0], newest=ck.name, temp_folders=temps))
            prev, start, in_chain, done = ck, checkpoint_step(ck), in_chain + 1, done + 1
            stale = [root/t for t in temps]
        outs = finish_chain(path, whole, BIG_EPOCH, *args)
        assert f'ddpsafe: resumed from {prev} ' in outs[0], outs[0][-3000:]
        assert not list(root.glob('.step-*')), f'temporary folders left after resume: {list(root.glob(".step-*"))}'
        assert subprocess.run([str(BIN/'ddpsafe-verify'), str(root)], capture_output=True).returncode == 0
        chains += 1
    during = sum(o['killed_during_save'] is not None for o in kills)
    print(f'\n[SIGKILL] seed {SEED}: {runs}/{runs} kills of rank 0 ({during} in the middle of a save): every final-named folder '
          f'complete, the newest complete checkpoint verified and resumed; {sum(bool(o["temp_folders"]) for o in kills)} left '
          f'temporary folders, removed by the resume; {chains} chain(s) ended bit-identical to the uninterrupted run\n  '
          + '\n  '.join(map(str, kills)))

# ---------------------------------------------------------------------------------------------------------------
# Switch files: save-now saves once and goes on; stop-now saves and stops (exit 0: exit_code is for signals only)

@pytest.mark.timeout(600)
def test_switch_files(folder):
    whole = tc.baseline(N_EPOCH, '--fit', 'one_cycle')
    path = folder/'run'; root = path/'checkpoints'
    procs = tc.launch(path, N_EPOCH, '--slow', SLOW, '--keep', '50')
    try:
        waited(procs, 0, 'STEP 2'); time.sleep(SLOW/2); (root/'save-now').touch()
        waited(procs, 0, r'SAVE-END \d+ switch saved [\d.]+')
        a = int(tc.markers(procs.output(0), 'SAVE-END')[-1][0])
        waited(procs, 0, f'STEP {a+2}'); time.sleep(SLOW/2); (root/'stop-now').touch()
    except BaseException: procs.kill(); raise
    codes, outs, res = tc.finish(procs, 180)
    assert codes == [0, 0], f'stop-now: exit codes {codes}\n' + fail_msg(outs)
    b = res[0]['steps']
    assert [o['steps'] for o in res] == [b, b] and a + 2 < b < STEPS, f'save-now at {a}, stopped at {[o["steps"] for o in res]}'
    for r, o in enumerate(outs):
        sw = [int(g) for g, why, done, t in tc.markers(o, 'SAVE-END') if why == 'switch' and done == 'saved']
        assert sw == [a, b], f'rank {r}: switch saves {sw}, want [{a}, {b}]'
        steps = [int(g) for (g,) in tc.markers(o, 'STEP')]
        assert steps == list(range(1, b+1)), f'rank {r}: steps {steps}'                 # went on after save-now
    assert f'ddpsafe: stopping at step {b} after a switch' in outs[0]
    assert not (root/'save-now').exists() and not (root/'stop-now').exists()
    want = sorted({s for s in range(PER_EPOCH, b+1, PER_EPOCH)} | {a, b})             # the epoch checkpoints + one each
    assert [checkpoint_step(p) for p in checkpoints(root)] == want
    assert all(check_checkpoint(p) == [] for p in checkpoints(root))
    reasons = {checkpoint_step(p): read_manifest(p)['reason'] for p in checkpoints(root)}
    assert reasons[b] == 'switch' and (a % PER_EPOCH == 0 or reasons[a] == 'switch'), reasons
    finish_chain(path, whole, N_EPOCH)
    print(f'\n[switch] save-now -> one extra checkpoint at step {a}, the run went on; stop-now -> checkpoint at step {b}, '
          f'exit {codes} (exit_code applies to signals only); switch files removed; resumed run bit-identical; '
          f'checkpoints {reasons}')

# ---------------------------------------------------------------------------------------------------------------
# A second SIGTERM while saving

@pytest.mark.timeout(600)
@pytest.mark.parametrize('n', counts(1, 10, timeout=3000, name='runs'))
def test_second_sigterm_while_saving(folder, n):
    """'during-save': SIGTERM to a random rank, then, once rank 0 has begun writing the signal's checkpoint (big model: ~0.3 s),
    SIGTERM to both ranks; 'twice': two SIGTERMs 5 ms apart to one rank. Alternating, short: 1 run, full: 10"""
    rng = random.Random(SEED + 2)
    seen = []
    for i in range(n):
        mode = ('during-save', 'twice')[i % 2]
        path = folder/f'run{i}'; root = path/'checkpoints'
        k, r = rng.randint(1, BIG_STEPS - 4), rng.randrange(2)
        procs = tc.launch(path, BIG_EPOCH, *BIG, '--slow', '0.1')
        try:
            waited(procs, r, f'STEP {k}'); time.sleep(rng.uniform(0.02, 0.08))
            procs.signal(r, signal.SIGTERM)
            if mode == 'twice': time.sleep(0.005); procs.signal(r, signal.SIGTERM); t2 = time.time()
            else:
                waited(procs, 0, r'SAVE-BEGIN \d+ signal [\d.]+')             # rank 0 is writing the checkpoint
                procs.signal(0, signal.SIGTERM); procs.signal(1, signal.SIGTERM); t2 = time.time()
        except BaseException: procs.kill(); raise
        codes, outs, res = tc.finish(procs, 180)
        s, m = check_signal_stop(path, codes, outs, res, 0)
        assert not list(root.glob('.step-*')), list(root.glob('.step-*'))
        v = subprocess.run([str(BIN/'ddpsafe-verify'), str(root)], capture_output=True, text=True)
        assert v.returncode == 0, v.stdout
        begins = {int(g): float(t) for g, why, t in tc.markers(outs[0], 'SAVE-BEGIN') if why == 'signal'}
        ends = {int(g): float(t) for g, why, done, t in tc.markers(outs[0], 'SAVE-END') if why == 'signal'}
        when = 'before the save' if t2 < begins[s] else 'during the save' if t2 < ends[s] else 'after the save'
        seen.append(dict(mode=mode, rank=r, after_step=k, stop=s, second_sigterm=when))
    print(f'\n[second SIGTERM] {n}/{n} runs: exit 75 on both ranks, one signal checkpoint that verifies, no temporary folder\n  '
          + '\n  '.join(map(str, seen)))

# ---------------------------------------------------------------------------------------------------------------
# The exit code must survive the process's exit

SIDE_GROUP = """import gc, os, sys, torch, torch.distributed as dist
from datetime import timedelta
def threads(): return len(os.listdir('/proc/self/task'))
before = threads()
dist.init_process_group('gloo', timeout=timedelta(seconds=60))
from ddpsafe.dist.collectives import on_main
from ddpsafe.testing import wait_until, WaitTimeout
on_main(lambda: 1)                       # what every checkpoint save does: a broadcast on ddpsafe's side group
dist.destroy_process_group(); gc.collect()   # torch's own function: ddpsafe does not replace it
try: wait_until(lambda: threads() == before, 5, 'the threads to end')   # an ending thread leaves the OS's list a moment later
except WaitTimeout: pass
print(f'THREADS {before} {threads()}', flush=True)
"""

@pytest.mark.timeout(120)
def test_side_group_released_on_destroy(folder):
    from ddpsafe.testing import run_script
    (folder/'side.py').write_text(SIDE_GROUP)
    outs = run_script(folder/'side.py', 2, timeout=90)
    counts = [tuple(int(x) for x in o.split('THREADS')[1].split()) for o in outs]
    print(f'\n[side group] OS threads per rank (before init, after destroy_process_group): {counts}')
    assert all(after == before for before, after in counts), f'gloo threads still alive after destroy_process_group: {counts}'
