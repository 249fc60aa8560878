"""Proof (issue 17): checkpoints on object storage, against a real S3 server on loopback (SeaweedFS, `ddpsafe.testing.S3TestServer`).

- the commit there: files first, the manifest last; an upload that fails leaves the old object and no visible checkpoint;
  rotation deletes the manifest first; leftovers of an interrupted save are removed by the next run;
- 2 ranks training with `CheckpointCallback(path='s3://...')`: SIGTERM mid-run, exit 75, the rerun resumes from S3 and ends
  bit-identical to an uninterrupted local run; `ddpsafe-ls`/`verify`/`status` on the URL with the credentials in `AWS_*`;
- the server killed in the middle of saves and started again: the run either carries on or fails on every rank with the
  URL named; either way no incomplete checkpoint is ever loaded, and every complete one verifies.

    python -m pytest tests/test_s3.py -s"""
from __future__ import annotations
import os, sys, time, json, signal, shutil, tempfile, subprocess
from pathlib import Path
import pytest, xxhash, torch
from ddpsafe.testing import S3TestServer
from ddpsafe.storage.commit import as_path, commit_file, FileWriter
from ddpsafe.callback.preempt import REQUEUE_EXIT_CODE
from ddpsafe.storage.manifest import (write_checkpoint, checkpoints, newest_complete, check_checkpoint, read_manifest, Retention,
                              clean_incomplete, checkpoint_name, MANIFEST)
from conftest import train_ckpt, fail_msg
tc = train_ckpt()
BIN = Path(sys.executable).parent

@pytest.fixture(scope='module')
def s3():
    with S3TestServer() as server: yield server

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-s3-test-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def cli(s3, *args) -> subprocess.CompletedProcess:
    "A ddpsafe command with the server's credentials and endpoint in the environment only"
    return subprocess.run([str(BIN/args[0]), *map(str, args[1:])], capture_output=True, text=True, timeout=120, env={**os.environ, **s3.env})

# ---------------------------------------------------------------------------------------------------------------
# The commit on S3

@pytest.mark.timeout(300)
def test_commit_protocol_on_s3(s3):
    root = as_path(s3.url('protocol'), s3.storage_options)
    big = os.urandom(12 << 20)
    for step in (10, 20, 30): write_checkpoint(root, step, {'w.bin': big, 'o.bin': b'%d' % step}, dict(epoch=step // 10))
    assert [p.name for p in checkpoints(root)] == ['step-00000010', 'step-00000020', 'step-00000030']
    assert check_checkpoint(root/'step-00000030') == []
    m = read_manifest(root/'step-00000030')
    assert m['files']['w.bin'] == dict(size=len(big), xxh3=xxhash.xxh3_64_hexdigest(big)), 'checksum taken while uploading'

    # an upload that breaks part way through a multipart upload (over s3fs's 50 MB blocks): the old object stays, whole
    target = as_path(s3.url('protocol', 'model.bin'), s3.storage_options)
    commit_file(target, b'old weights')
    started = []
    def broken(f):
        for _ in range(6): f.write(big)                           # 72 MB: the first part is uploaded
        started.append(f.mpu is not None)
        raise ConnectionError('connection reset by peer')
    import ddpsafe.storage.commit as cm
    cm.UPLOAD_BACKOFF, backoff = 0.01, cm.UPLOAD_BACKOFF
    try:
        with pytest.raises(OSError, match='s3://ddpsafe/protocol/model.bin'): commit_file(target, FileWriter(broken))
    finally: cm.UPLOAD_BACKOFF = backoff
    assert started and all(started), 'the broken upload never started a multipart upload: the test would prove nothing'
    assert target.read_bytes() == b'old weights'
    uploads = target.fs.call_s3('list_multipart_uploads', Bucket=s3.bucket).get('Uploads', [])
    assert not [u for u in uploads if u['Key'].endswith('model.bin')], f'multipart uploads left open: {uploads}'

    # a save that dies before its manifest: listed as a folder, never complete, removed by the next run
    (root/'step-00000040').mkdir(exist_ok=True); (root/'step-00000040'/'w.bin').write_bytes(b'half')
    assert newest_complete(root).name == 'step-00000030'
    assert [p.name for p in clean_incomplete(root)] == ['step-00000040']
    # a byte changed in the store: resume skips it, naming the object
    (root/'step-00000030'/'o.bin').write_bytes(b'31')
    skipped = []
    assert newest_complete(root, skipped=skipped).name == 'step-00000020'
    assert 's3://ddpsafe/protocol/step-00000030/o.bin' in skipped[0][1][0], skipped
    # rotation: the manifest first, then the files
    assert [p.name for p in Retention(1).rotate(root)] == ['step-00000010']
    assert [p.name for p in checkpoints(root)] == ['step-00000020', 'step-00000030']
    print(f'\n[s3] commit on S3: 3 checkpoints of 12 MB, a multipart upload broken after its first part left the old object and no open upload, '
          f'an unfinished save invisible and cleaned, a changed byte skipped, rotation kept the newest complete')

# ---------------------------------------------------------------------------------------------------------------
# Training on 2 ranks, checkpoints on S3

N_EPOCH, SLOW = 4, 0.15

@pytest.mark.timeout(600)
@pytest.mark.parametrize('mode', ['sync', 'async', 'local'])
def test_sigterm_resume_on_s3(s3, folder, mode):
    """SIGTERM to rank 1 mid-run, checkpoints on s3://: exit 75, the rerun resumes and ends bit-identical to a local run.
    `local`: committed to a local folder first; the stop waits for the upload, so S3 has the signal's checkpoint too"""
    whole = tc.baseline(N_EPOCH)
    url = s3.url('train', f'run-{mode}')
    args = ('--ckpt', url, '--slow', SLOW, *(['--async-save'] if mode == 'async' else []), *(['--local', 'near'] if mode == 'local' else []))
    codes, outs, res = tc.run(folder, N_EPOCH, *args, '--kill', 'SIGTERM:1:5', env=s3.env, timeout=180)
    assert codes == [REQUEUE_EXIT_CODE]*2, f'exit codes {codes}\n' + fail_msg(outs)
    s = res[0]['steps']
    where = folder/'near' if mode == 'local' else url
    assert res[1]['steps'] == s and f'ddpsafe: stopping at step {s} after a signal; checkpoint saved in {where}' in outs[0], fail_msg(outs)
    root = as_path(url, s3.storage_options)
    ck = newest_complete(root)
    assert ck is not None and ck.name == checkpoint_name(s) and read_manifest(ck)['reason'] == 'signal', f'newest on S3: {ck}'
    assert not (folder/'checkpoints').exists(), 'nothing written to the default local folder'
    ls = cli(s3, 'ddpsafe-ls', url)
    assert ls.returncode == 0 and checkpoint_name(s) in ls.stdout and 'complete' in ls.stdout, ls.stdout + ls.stderr
    st = cli(s3, 'ddpsafe-status', url)
    assert st.returncode == REQUEUE_EXIT_CODE, st.stdout + st.stderr

    codes, outs, res = tc.run(folder, N_EPOCH, *args, '--out', folder/'w', env=s3.env, timeout=180)
    assert codes == [0, 0], f'exit codes {codes}\n' + fail_msg(outs)
    assert f'ddpsafe: resumed from {where}/{checkpoint_name(s)}' in outs[0], outs[0][-3000:]     # a tie: the local tier
    w = tc.weights(folder/'w')
    assert all(tc.same(x, whole[0]) for x in w), 'resumed from S3, the run differs from the uninterrupted local one'
    vf = cli(s3, 'ddpsafe-verify', url)
    assert vf.returncode == 0 and 'with problems' in vf.stdout and ', 0 with problems' in vf.stdout, vf.stdout + vf.stderr
    assert cli(s3, 'ddpsafe-status', url).returncode == 0
    # the final weights out of S3, for use without ddpsafe: to a local file and to another object
    import safetensors.torch as st
    out_url = s3.url('models', f'{mode}.safetensors')
    for out in (folder/'exported.safetensors', out_url):
        ex = cli(s3, 'ddpsafe-export', url, '--out', out)
        assert ex.returncode == 0, ex.stdout + ex.stderr
    for got in (st.load_file(folder/'exported.safetensors'), st.load(as_path(out_url, s3.storage_options).read_bytes())):
        assert got.keys() == whole[0].keys() and all(torch.equal(got[k], whole[0][k]) for k in got), 'the export differs from the final weights'
    print(f'\n[s3] {mode}: 2 ranks on {url}: SIGTERM to rank 1 after step 5, both stopped at {s}, exit 75; the rerun resumed from {where} '
          f'and ended bit-identical to the uninterrupted local run; ddpsafe-ls/verify/status read the URL with AWS_* only')

# ---------------------------------------------------------------------------------------------------------------
# The server killed in the middle of saves

@pytest.mark.timeout(900)
@pytest.mark.parametrize('down', ['2s', 'until_failed'])
def test_server_killed_during_saves(s3, folder, down):
    """Kill -9 of the S3 server in the middle of a save, back after 2 s, or only once the run has given up:
    no incomplete checkpoint ever counts, and a failure is raised on every rank with the URL"""
    url = s3.url('train', f'killed-{down}')
    root = as_path(url, s3.storage_options)
    args = ('--ckpt', url, '--model-mb', '16', '--every-steps', '1', '--keep', '3', '--exit-code', 'none')
    # until it fails: botocore's own retries off (AWS_MAX_ATTEMPTS=1) so that giving up takes s3fs's and ddpsafe's retries only,
    # seconds instead of a minute; the outcome is the same
    procs = tc.launch(folder, 3, *args, env={**s3.env, **({'AWS_MAX_ATTEMPTS': '1'} if down != '2s' else {})})
    try:
        assert tc.wait_for(procs, 0, 'SAVE-END 2 steps saved .*', 240), 'rank 0 never finished the save of step 2\n' + fail_msg([procs.output(0), procs.output(1)])
        assert tc.wait_for(procs, 0, 'SAVE-BEGIN 3 steps .*', 120)
        time.sleep(0.05)
        s3.kill(); t_kill = time.time()
        if down == '2s': time.sleep(2); s3.start()
        else: tc.wait_for(procs, 0, 'RESULT .*', 600)
    except BaseException: procs.kill(); s3.start(); raise
    codes, outs, res = tc.finish(procs, 600)
    if down != '2s':
        s3.start()
        assert codes != [0, 0], 'the run succeeded with the server down'
    complete = [p for p in checkpoints(root) if (p/MANIFEST).exists()]
    assert complete and all(check_checkpoint(p) == [] for p in complete), {str(p): check_checkpoint(p) for p in complete}
    if codes == [0, 0]: outcome = 'carried on after the server came back'
    else:
        assert all(c != 0 for c in codes), f'exit codes {codes}: one rank failed, the other did not\n' + fail_msg(outs)
        assert all(url in (r or {}).get('error', '') or url in o for r, o in zip(res, outs)), fail_msg(outs)
        took = max(r['error_time'] for r in res) - t_kill
        outcome = f'failed on every rank (exit {codes}) {took:.0f} s after the kill, rank 1 saying: {res[1]["error"][:300]}'
    # whatever happened, the next run starts from the newest complete checkpoint, and ends
    codes2, outs2, _ = tc.run(folder, 3, *args, env=s3.env, timeout=600)
    assert codes2 == [0, 0], f'the rerun failed: {codes2}\n' + fail_msg(outs2)
    assert all(check_checkpoint(p) == [] for p in checkpoints(root)), 'after the rerun, every checkpoint verifies'
    print(f'\n[s3] server killed during the save of step 3, back {"after 2 s" if down == "2s" else "after the run failed"}: the run {outcome}; complete checkpoints then: '
          f'{[p.name for p in complete]}, all verified; the rerun finished')

# ---------------------------------------------------------------------------------------------------------------
# A bucket that is not there

@pytest.mark.timeout(300)
@pytest.mark.parametrize('tiers', ['s3', 'local+s3'])
def test_missing_bucket_fails_before_training(s3, folder, tiers):
    "A URL that cannot be written: a clear error on every rank, naming it, before the first step (with a local tier too)"
    url = 's3://no-such-bucket/run'
    codes, outs, res = tc.run(folder, N_EPOCH, '--ckpt', url, *(['--local', 'near'] if tiers != 's3' else []), env=s3.env, timeout=180)
    assert codes == [1, 1], f'exit codes {codes}\n' + fail_msg(outs)
    for r in res: assert url in r['error'] and 'cannot write in this checkpoints folder' in r['error'], r['error']
    assert not any('STEP 1' in o for o in outs), 'it trained before finding out'
    print(f'\n[s3] {url} ({tiers}): every rank raised before the first step: {res[1]["error"][:200]}')

# ---------------------------------------------------------------------------------------------------------------
# A local tier first

@pytest.mark.timeout(900)
def test_local_first_kill9_then_resume_from_either_tier(s3, folder):
    """`local=`: checkpoints committed locally, uploaded in the background. The S3 server dies, the job is killed -9
    after a local commit whose upload never finished: the rerun resumes from the local copy (and uploads it); on a new
    machine (no local folder) the rerun resumes from S3. Both end bit-identical to an uninterrupted run."""
    n_epoch, slow = 4, 0.3
    whole = tc.baseline(n_epoch)
    url = s3.url('tiers', 'a')
    args = ('--ckpt', url, '--local', 'local-ckpts', '--every-steps', '1', '--keep', '3', '--slow', slow)
    root = as_path(url, s3.storage_options)
    procs = tc.launch(folder, n_epoch, *args, env=s3.env)
    try:
        assert tc.wait_for(procs, 0, 'SAVE-END 2 steps saved .*', 240), fail_msg([procs.output(0), procs.output(1)])
        from ddpsafe.testing import wait_until
        wait_until(lambda: (ck := newest_complete(root, checksums=False)) is not None and checkpoint_step_of(ck) >= 2, 60, 'an upload to S3')
        uploaded = checkpoint_step_of(newest_complete(root))
        s3.kill()                                                   # no upload gets through from now on
        assert tc.wait_for(procs, 0, f'SAVE-END {uploaded + 3} steps saved .*', 240), fail_msg([procs.output(0), procs.output(1)])
        procs.kill()                                                # kill -9, both ranks, uploads in flight or waiting
    except BaseException: procs.kill(); s3.start(); raise
    s3.start()
    local = folder/'local-ckpts'
    newest_local = checkpoint_step_of(newest_complete(local))
    far_before = checkpoint_step_of(newest_complete(root))
    assert newest_local >= uploaded + 3 and far_before < newest_local, (newest_local, far_before)
    # a new machine: S3 as it was, no local folder (the S3 folder copied to another URL first, for the other half)
    url_b = s3.url('tiers', 'b')
    root.fs.copy(root.path, as_path(url_b, s3.storage_options).path, recursive=True)
    machine_b = folder/'b'; machine_b.mkdir()

    codes, outs, res = tc.run(folder, n_epoch, *args, '--out', folder/'w', env=s3.env, timeout=300)
    assert codes == [0, 0], f'exit codes {codes}\n' + fail_msg(outs)
    assert f'ddpsafe: resumed from {local}/step-{newest_local:08d}' in outs[0], outs[0][-3000:]
    assert all(tc.same(x, whole[0]) for x in tc.weights(folder/'w')), 'resumed from the local tier, the run differs'
    assert checkpoint_step_of(newest_complete(root)) == n_epoch * 3, 'the last checkpoint was not uploaded at the end of fit'
    assert all(check_checkpoint(p) == [] for p in checkpoints(root) if (p/MANIFEST).exists())

    codes, outs, res = tc.run(machine_b, n_epoch, *args[:1], url_b, *args[2:], '--out', machine_b/'w', env=s3.env, timeout=300)
    assert codes == [0, 0], f'exit codes {codes}\n' + fail_msg(outs)
    assert f'ddpsafe: resumed from {url_b}/step-{far_before:08d}' in outs[0], outs[0][-3000:]
    assert all(tc.same(x, whole[0]) for x in tc.weights(machine_b/'w')), 'resumed from S3, the run differs'
    print(f'\n[s3] local tier: S3 down after step {uploaded} was uploaded, kill -9 after the local commit of step {newest_local} '
          f'(S3 newest: {far_before}); the rerun resumed from the local step {newest_local}, a new machine from S3 step {far_before}; '
          f'both bit-identical to the uninterrupted run')

def checkpoint_step_of(p) -> int|None: return None if p is None else int(p.name.split('-')[1])
