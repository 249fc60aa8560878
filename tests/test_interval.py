"""Issue 43 (1): `CheckpointCallback(every_seconds='auto')` end to end, in one process, on real fits and a real folder.

A first launch records its start and end in `launches.jsonl`, measures its saves and prints the interval it chose
(at least 100 times a save's cost); a second launch, after one killed (a start with no end), sees the failure and
chooses with a lower mean time between failures. A folder whose launches failed every few seconds saves by time,
and never faster than the 1% floor allows.

    python -m pytest tests/test_interval.py -s      # about 10 s"""
from __future__ import annotations
import io, time, contextlib
from pathlib import Path
import pytest
from fastai.callback.core import Callback, CancelFitException
import fastai.callback.progress   # learn.no_bar
import ddpsafe.all   # fastai patched, as users have it
from ddpsafe.callback.checkpoint import CheckpointCallback
from ddpsafe.callback.interval import LAUNCHES, MAX_SHARE, PRIOR_MTBF, read_launches, record_launch
from ddpsafe.testing import synth_learner

@pytest.fixture
def folder(tmp_path): return tmp_path   # pytest's own, removed after a few runs

class Saves(CheckpointCallback):
    "`CheckpointCallback` that lists why and when it saved"
    def save(self, reason='request', **kwargs):
        if done := super().save(reason, **kwargs): self.saves.append((reason, time.monotonic()))
        return done

class Until(Callback):
    "Steps of at least `secs`; stop the fit after `n` timed saves of `cb`, or after `limit` seconds"
    def __init__(self, cb, n=2, secs=0.02, limit=40.): self.cb, self.n, self.secs, self.limit, self.began = cb, n, secs, limit, time.monotonic()
    def after_batch(self):
        if not self.training: return
        time.sleep(self.secs)
        if sum(r == 'time' for r, _ in self.cb.saves) >= self.n or time.monotonic() - self.began > self.limit: raise CancelFitException()

def auto_fit(folder, n_epoch, *cbs, **kwargs):
    "A `fit` with `every_seconds='auto'` on `folder`: the callback, and what rank 0 printed"
    learn, cb = synth_learner(path=folder), Saves(every_seconds='auto', keep=100, exit_code=None, **kwargs)
    cb.saves, out = [], io.StringIO()
    with learn.no_bar(), learn.no_logging(), contextlib.redirect_stdout(out): learn.fit(n_epoch, cbs=[cb, *(c(cb) for c in cbs)])
    return cb, out.getvalue()

@pytest.mark.timeout(120)
def test_auto_records_launches_and_a_kill_lowers_m(folder):
    cb, said = auto_fit(folder, 2)                       # a save at each epoch's end measures c
    root = folder/'checkpoints'
    recs = read_launches(root)
    assert [(r['ev'], r.get('how')) for r in recs] == [('start', None), ('end', 'finished')], recs
    assert recs[1]['save_seconds'] > 0
    notes = [l for l in said.splitlines() if "every_seconds='auto'" in l]
    print('\n[auto] first launch:\n  ' + '\n  '.join(notes))
    assert 'no save measured yet: the first timed save after 60 s' in notes[0], said
    why = cb.timer.why                                # chosen again after each save (said again if it moved by half)
    assert why['measured'] == 'this launch' and why['rule'] != 'first', why
    assert why['c'] > 0 and cb.timer.interval >= why['c']/MAX_SHARE - 1e-9, why
    assert (why['failures'], why['launches']) == (0, 1) and why['m'] >= PRIOR_MTBF, why
    m1 = why['m']

    record_launch(root, dict(ev='start', launch='killed', t=time.time()))   # a launch SIGKILLed: a start with no end
    cb, said = auto_fit(folder, 3)                       # a plain fit asking for one more epoch goes on
    notes = [l for l in said.splitlines() if "every_seconds='auto'" in l]
    print('[auto] after a kill:\n  ' + '\n  '.join(notes))
    assert 'a save every' in notes[0] and 'measured in the last launch' in notes[0] and '1 failure in' in notes[0], said
    why = cb.timer.why
    assert (why['failures'], why['launches']) == (1, 3), why
    assert why['m'] < m1 * 0.6, (why['m'], m1)          # about half: the prior counts as one failure, this is the second
    assert cb.timer.interval >= why['c']/MAX_SHARE - 1e-9
    assert [r.get('how') for r in read_launches(root) if r['ev'] == 'end'] == ['finished', 'finished']
    print(f"[auto] c = {why['c']*1000:.2f} ms, M = {m1/3600:.2f} h then {why['m']/3600:.2f} h, interval = {cb.timer.interval:.2f} s")

@pytest.mark.timeout(120)
def test_auto_saves_by_time_in_a_flaky_folder(folder):
    root = folder/'checkpoints'; root.mkdir()
    t0 = time.time() - 2000
    record_launch(root, dict(ev='start', launch='first', t=t0))
    record_launch(root, dict(ev='end', launch='first', t=t0 + 1, how='preempted', save_seconds=0.01))
    for i in range(1, 600): record_launch(root, dict(ev='start', launch=f'k{i}', t=t0 + 2*i))   # killed every 2 s
    cb, said = auto_fit(folder, 100, Until, every_epoch=None)
    why, timed = cb.timer.why, [t for r, t in cb.saves if r == 'time']
    print(f"\n[auto] flaky folder: c = {why['c']*1000:.2f} ms, M = {why['m']:.1f} s, interval = {cb.timer.interval:.2f} s ({why['rule']}); "
          f"{len(timed)} timed saves, {[round(b - a, 2) for a, b in zip(timed, timed[1:])]} s apart")
    assert why['failures'] == 600 and why['m'] < 60, why
    assert len(timed) >= 2, said
    assert cb.timer.interval >= why['c']/MAX_SHARE - 1e-9
    costs = cb.timer.costs
    assert all(b - a >= 0.9*min(cb.timer.interval, 100*min(costs)) for a, b in zip(timed, timed[1:])), (timed, costs)
