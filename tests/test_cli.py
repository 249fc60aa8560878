"""The installed commands on folders built with `write_checkpoint`: `ddpsafe-ls` verifies checksums and marks best from the
recorded monitor/comp, `ddpsafe-verify` passes leftovers of interrupted saves and fails damaged checkpoints,
`ddpsafe-status` exits 0 / requeue / stopped / 1 / 2 with --json; the owner record confuses none of them. After a real fit,
`ddpsafe-export --best` writes the model SaveModelCallback kept when both callbacks watch one metric, and follows
CheckpointCallback's monitor when they differ."""
from __future__ import annotations
import sys, json, time, subprocess
from pathlib import Path
import pytest
from ddpsafe.storage.manifest import write_checkpoint, checkpoint_name, MANIFEST, REQUEUE_EXIT_CODE, STOPPED_EXIT_CODE
from ddpsafe.storage.owner import claim_folder, OWNER

BIN = Path(sys.executable).parent

def cli(cmd:str, *args, timeout:float=120) -> subprocess.CompletedProcess:
    "Run an installed command; a hang fails the test with the command named"
    try: return subprocess.run([str(BIN/cmd), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired: raise AssertionError(f'{cmd} {" ".join(map(str, args))} did not finish within {timeout} s')

def write(root:Path, step:int, size:int=1000, **meta) -> Path:
    "A checkpoint of two small files at `step` with `meta` in its manifest"
    return write_checkpoint(root, step, {'model.safetensors': lambda p: p.write_bytes(bytes([step % 251])*size),
                                         'state.pt': lambda p: p.write_bytes(b's'*100)}, meta)

def flip_byte(f:Path, at:int=-100):
    b = bytearray(f.read_bytes()); b[at] ^= 0xFF; f.write_bytes(bytes(b))

def ls_rows(out:str) -> dict:
    "checkpoint name -> the words of its line in `ddpsafe-ls` output"
    return {l.split()[0]: l.split() for l in out.splitlines()[1:] if l and not l.startswith('owner:')}

STATUSES = ('complete', 'incomplete', 'corrupt', 'leftover')
def status_of(words:list) -> str: return next(w for w in words if w in STATUSES)
def is_best(words:list) -> bool: return words[1:2] == ['best']     # the mark stands beside the name

@pytest.mark.timeout(120)
def test_flipped_byte_is_corrupt(tmp_path):
    root = tmp_path/'checkpoints'
    for s in (10, 20, 30): write(root, s, epoch=s//10, monitor='valid_loss', comp='less', metric=1/s)
    flip_byte(root/checkpoint_name(20)/'model.safetensors')
    ls = cli('ddpsafe-ls', root)
    assert ls.returncode == 0 and 'Traceback' not in ls.stderr, ls.stderr
    rows = ls_rows(ls.stdout)
    assert 'corrupt' in rows['step-00000020'] and 'complete' not in rows['step-00000020'], ls.stdout
    assert 'complete' in rows['step-00000010'] and 'complete' in rows['step-00000030'], ls.stdout
    v = cli('ddpsafe-verify', root)
    assert v.returncode == 1, v.stdout
    assert f'{root/"step-00000020"/"model.safetensors"}: checksum differs' in v.stdout and '2 ok, 1 with problems' in v.stdout, v.stdout
    assert cli('ddpsafe-verify', root/checkpoint_name(20)).returncode == 1
    assert cli('ddpsafe-verify', root/checkpoint_name(30)).returncode == 0

@pytest.mark.timeout(120)
def test_missing_manifest_and_file_fail_verify(tmp_path):
    root = tmp_path/'checkpoints'
    for s in (1, 2, 3): write(root, s, epoch=s)
    (root/checkpoint_name(1)/MANIFEST).unlink()
    (root/checkpoint_name(2)/'state.pt').unlink()
    v = cli('ddpsafe-verify', root)
    assert v.returncode == 1 and 'no manifest.json' in v.stdout and 'state.pt: listed in the manifest, missing on disk' in v.stdout, v.stdout
    rows = ls_rows(cli('ddpsafe-ls', root).stdout)
    assert [status_of(rows[checkpoint_name(s)]) for s in (1, 2, 3)] == ['incomplete', 'corrupt', 'complete'], rows

@pytest.mark.timeout(120)
def test_leftover_tmp_folder_passes_verify(tmp_path):
    root = tmp_path/'checkpoints'
    for s in (5, 10): write(root, s, epoch=s//5)
    tmp = root/'.step-00000015.tmp-4242-deadbeef'; tmp.mkdir(); (tmp/'model.safetensors').write_bytes(b'half')
    old = root/'.step-00000001.old-0a1b2c3d'; old.mkdir()
    v = cli('ddpsafe-verify', root)
    assert v.returncode == 0, v.stdout + v.stderr
    assert f'{tmp}: leftover of a save that never finished' in v.stdout and f'{old}: leftover of a removal' in v.stdout, v.stdout
    assert '2 ok, 0 with problems, 2 leftover temporary folders' in v.stdout, v.stdout
    rows = ls_rows(cli('ddpsafe-ls', root).stdout)
    assert status_of(rows[tmp.name]) == 'incomplete' and status_of(rows[old.name]) == 'leftover', rows
    flip_byte(root/checkpoint_name(10)/'model.safetensors')            # a leftover does not hide real damage
    assert cli('ddpsafe-verify', root).returncode == 1

@pytest.mark.timeout(120)
def test_best_from_recorded_comp(tmp_path):
    "monitor 'mae' with comp 'greater' marks the highest; without comp the old guess (an error: lowest) still applies"
    root = tmp_path/'greater'
    for s, v in [(1, 0.30), (2, 0.90), (3, 0.10), (4, 0.50)]: write(root, s, epoch=s, monitor='mae', comp='greater', metric=v)
    rows = ls_rows(cli('ddpsafe-ls', root).stdout)
    assert [is_best(rows[checkpoint_name(s)]) for s in (1, 2, 3, 4)] == [False, True, False, False], rows
    assert 'mae=0.9' in rows[checkpoint_name(2)], rows
    root = tmp_path/'less'
    for s, v in [(1, 0.30), (2, 0.90), (3, 0.10), (4, 0.50)]: write(root, s, epoch=s, monitor='accuracy', comp='less', metric=v)
    rows = ls_rows(cli('ddpsafe-ls', root).stdout)
    assert is_best(rows[checkpoint_name(3)]) and sum(map(is_best, rows.values())) == 1, rows
    root = tmp_path/'legacy'
    for s, v in [(1, 0.30), (2, 0.10)]: write(root, s, epoch=s, monitor='valid_loss', metric=v)
    rows = ls_rows(cli('ddpsafe-ls', root).stdout)
    assert is_best(rows[checkpoint_name(2)]), rows

REASONS = {'stop-switch': 'switch', 'late-stop': 'end'}

def status_folder(root:Path, *kinds, legacy=False) -> Path:
    "Checkpoints written for `kinds` ('epoch', 'steps', 'signal', 'switch', 'stop-switch', 'late-stop', 'end'), oldest first"
    for i, kind in enumerate(kinds, 1):
        meta = dict(epoch=i-1, reason=REASONS.get(kind, kind))
        if not legacy: meta.update(stop=kind in ('signal', 'stop-switch', 'late-stop'), finished=kind == 'end')
        write(root, i*10, **meta)
    return root

@pytest.mark.timeout(180)
@pytest.mark.parametrize('kinds,legacy,code,state', [
    (('epoch', 'end'), False, 0, 'finished'),
    (('epoch', 'signal'), False, REQUEUE_EXIT_CODE, 'preempted'),
    (('epoch', 'stop-switch'), False, STOPPED_EXIT_CODE, 'stopped'),   # the user asked to stop: no requeue
    (('signal', 'stop-switch'), False, STOPPED_EXIT_CODE, 'stopped'),  # preempted, resumed, then stopped by the user
    (('stop-switch', 'end'), False, 0, 'finished'),     # stopped, started again by hand, finished
    (('epoch', 'late-stop'), False, REQUEUE_EXIT_CODE, 'preempted'),  # a stop request of the last round saved as 'end': cause unknown
    (('epoch', 'switch'), False, 1, 'unfinished'),     # a save-now switch: the run went on
    (('epoch', 'steps'), False, 1, 'unfinished'),
    (('signal', 'end'), False, 0, 'finished'),         # preempted, resumed, finished
    (('epoch', 'end'), True, 0, 'finished'),           # manifests without stop/finished: by reason
    (('epoch', 'signal'), True, REQUEUE_EXIT_CODE, 'preempted'),
    (('epoch', 'switch'), True, 1, 'unfinished'),       # no flags: a save or a stop switch, cannot tell
    (('epoch',), True, 1, 'unfinished'),
])
def test_status_codes(tmp_path, kinds, legacy, code, state):
    root = status_folder(tmp_path/'checkpoints', *kinds, legacy=legacy)
    s = cli('ddpsafe-status', root)
    assert s.returncode == code, f'{kinds}: exit {s.returncode}, want {code}\n{s.stdout}{s.stderr}'
    assert s.stdout.startswith(f'{state}: {root/checkpoint_name(10*len(kinds))} (step {10*len(kinds)}, epoch {len(kinds)-1}'), s.stdout
    j = cli('ddpsafe-status', root, '--json')
    assert j.returncode == code, j.stderr
    got = json.loads(j.stdout)
    want_reason = REASONS.get(kinds[-1], kinds[-1])
    assert {k: got[k] for k in ('state', 'exit_code', 'step', 'epoch', 'reason')} == \
           dict(state=state, exit_code=code, step=10*len(kinds), epoch=len(kinds)-1, reason=want_reason), got
    assert abs(got['time'] - time.time()) < 600 and got['skipped'] == [], got

@pytest.mark.timeout(120)
def test_status_none(tmp_path):
    for root in (tmp_path/'missing', tmp_path):
        s = cli('ddpsafe-status', root)
        assert s.returncode == 2 and s.stdout.startswith('none:') and 'Traceback' not in s.stderr, s.stdout + s.stderr
    root = status_folder(tmp_path/'damaged', 'end')
    flip_byte(root/checkpoint_name(10)/'model.safetensors')
    j = cli('ddpsafe-status', root, '--json')
    assert j.returncode == 2 and json.loads(j.stdout)['state'] == 'none', j.stdout
    assert 'ddpsafe-status: skipping' in j.stderr and 'checksum differs' in j.stderr, j.stderr

@pytest.mark.timeout(120)
def test_status_skips_corrupt_newest(tmp_path):
    "A damaged newest checkpoint is skipped (said on stderr); the newest complete one decides"
    root = status_folder(tmp_path/'checkpoints', 'epoch', 'signal', 'end')
    flip_byte(root/checkpoint_name(30)/'model.safetensors')
    s = cli('ddpsafe-status', root, '--json')
    assert s.returncode == REQUEUE_EXIT_CODE, s.stdout + s.stderr
    assert json.loads(s.stdout)['step'] == 20 and json.loads(s.stdout)['skipped'][0]['checkpoint'] == str(root/checkpoint_name(30))
    assert f'ddpsafe-status: skipping {root/checkpoint_name(30)}: {root/checkpoint_name(30)/"model.safetensors"}: checksum differs' in s.stderr, s.stderr

@pytest.mark.timeout(120)
def test_owner_record_confuses_nothing(tmp_path):
    "A live owner record in the folder: ls shows the owner on its own line, verify and status are unchanged"
    root = status_folder(tmp_path/'checkpoints', 'epoch', 'end')
    c = claim_folder(root, heartbeat=0.2)
    try:
        assert (root/OWNER).exists()
        ls = cli('ddpsafe-ls', root)
        lines = ls.stdout.splitlines()
        assert len(lines) == 4 and lines[-1].startswith('owner: host ') and 'last heartbeat' in lines[-1], ls.stdout
        assert OWNER not in ls.stdout.replace(lines[-1], ''), ls.stdout
        v = cli('ddpsafe-verify', root)
        assert v.returncode == 0 and '2 ok, 0 with problems' in v.stdout and 'leftover' not in v.stdout, v.stdout
        assert cli('ddpsafe-status', root).returncode == 0
    finally: c.release()
    assert len(cli('ddpsafe-ls', root).stdout.splitlines()) == 3

@pytest.mark.timeout(300)
def test_ls_twenty_checkpoints_timing(tmp_path):
    "Wall time of ddpsafe-ls on 20 checkpoints of 1 MB (reported, not asserted)"
    root = tmp_path/'checkpoints'
    for s in range(1, 21): write(root, s, size=1<<20, epoch=s, monitor='valid_loss', comp='less', metric=1/s)
    times = []
    for _ in range(3):
        t = time.perf_counter(); ls = cli('ddpsafe-ls', root); times.append(time.perf_counter() - t)
        assert ls.returncode == 0 and len(ls_rows(ls.stdout)) == 20, ls.stdout
    imps = []
    for _ in range(3):
        t = time.perf_counter(); subprocess.run([sys.executable, '-c', 'import ddpsafe.cli'], check=True); imps.append(time.perf_counter() - t)
    imp = min(imps)
    print(f'\n[ddpsafe-ls] 20 checkpoints of 1 MB: {min(times):.2f} s best of 3 ({", ".join(f"{x:.2f}" for x in times)}); '
          f'of which importing ddpsafe.cli: {imp:.2f} s')

def test_requeue_code_shared_with_preempt():
    "`ddpsafe-status` answers from the manifest module's constants (no torch); the training side exits with the same one"
    from ddpsafe.callback.preempt import REQUEUE_EXIT_CODE as from_preempt
    from ddpsafe.callback.checkpoint import CheckpointCallback
    assert REQUEUE_EXIT_CODE == from_preempt == CheckpointCallback().exit_code
    assert len({0, 1, 2, REQUEUE_EXIT_CODE, STOPPED_EXIT_CODE}) == 5      # every state its own code

@pytest.mark.timeout(300)
@pytest.mark.parametrize('kwargs', [dict(), dict(every_epoch=None), dict(every_epoch=2)])
def test_status_after_a_real_run(tmp_path, kwargs):
    "A run that trained to its end is 'finished', whichever save came last: the last epoch's (the default) or the end of fit's"
    from fastai.callback.progress import ProgressCallback   # noqa: F401 (no_bar)
    from ddpsafe.testing import synth_learner
    from ddpsafe.callback.checkpoint import CheckpointCallback
    learn = synth_learner(path=tmp_path)
    with learn.no_bar(), learn.no_logging(): learn.fit(3, cbs=CheckpointCallback(**kwargs))
    s = cli('ddpsafe-status', tmp_path/'checkpoints')
    assert s.returncode == 0 and s.stdout.startswith('finished: '), f'{kwargs}: exit {s.returncode}\n{s.stdout}{s.stderr}'

# ---------------------------------------------------------------------------------------------------------------
# ddpsafe-export --best after a real fit: the same model as SaveModelCallback's when both watch one metric

def fit_with_best(path:Path, save_monitor:str):
    "4 epochs of 6 steps whose best valid_loss is not the last (lr 1.0 overshoots); SaveModelCallback on `save_monitor`"
    from fastai.callback.tracker import SaveModelCallback
    from ddpsafe.all import CheckpointCallback
    from ddpsafe.testing import synth_learner
    learn = synth_learner(path=path)
    with learn.no_bar(), learn.no_logging():
        learn.fit(4, 1.0, cbs=[SaveModelCallback(monitor=save_monitor), CheckpointCallback(monitor='valid_loss')])
    return learn, [v[1] for v in learn.recorder.values], [v[0] for v in learn.recorder.values]

@pytest.mark.timeout(300)
def test_export_best_is_save_model_callbacks_best(tmp_path):
    "Both callbacks on valid_loss: `ddpsafe-export --best` writes the weights SaveModelCallback kept, from the best epoch's checkpoint"
    import torch, safetensors.torch as st
    learn, valid, _ = fit_with_best(tmp_path, 'valid_loss')
    best = min(range(4), key=valid.__getitem__)
    assert best != 3, f'the best epoch is the last ({valid}): --best could not be told from the newest'
    res = cli('ddpsafe-export', tmp_path/'checkpoints', '--best', '--out', tmp_path/'best.safetensors')
    assert res.returncode == 0 and f'its best checkpoint by valid_loss' in res.stdout, (res.stdout, res.stderr)
    got, kept = st.load_file(tmp_path/'best.safetensors'), torch.load(tmp_path/'models'/'model.pth', weights_only=True)
    assert got.keys() == kept.keys() and all(torch.equal(got[k], kept[k]) for k in got), (got, kept)
    with st.safe_open(tmp_path/'best.safetensors', 'pt') as f: meta = f.metadata()
    assert (meta['step'], meta['monitor']) == (str(6*(best+1)), 'valid_loss'), meta
    newest = cli('ddpsafe-export', tmp_path/'checkpoints', '--out', tmp_path/'newest.safetensors')
    with st.safe_open(tmp_path/'newest.safetensors', 'pt') as f: end = f.metadata()
    assert newest.returncode == 0 and end['step'] == '24' != meta['step'], (end, meta)   # the newest is the fit's end, not the best epoch's
    ended = st.load_file(tmp_path/'newest.safetensors')       # the fit's end, saved again with the weights SaveModelCallback loaded
    assert all(torch.equal(ended[k], v) for k, v in learn.model.state_dict().items())

@pytest.mark.timeout(300)
def test_export_best_follows_checkpoint_callbacks_monitor(tmp_path):
    "SaveModelCallback on train_loss, CheckpointCallback on valid_loss: --best is CheckpointCallback's, by valid_loss"
    import safetensors.torch as st
    learn, valid, train = fit_with_best(tmp_path, 'train_loss')
    best = min(range(4), key=valid.__getitem__)
    res = cli('ddpsafe-export', tmp_path/'checkpoints', '--best', '--out', tmp_path/'best.safetensors')
    assert res.returncode == 0, res.stderr
    with st.safe_open(tmp_path/'best.safetensors', 'pt') as f: meta = f.metadata()
    assert (meta['step'], meta['monitor'], float(meta['metric'])) == (str(6*(best+1)), 'valid_loss', valid[best]), (meta, valid)
