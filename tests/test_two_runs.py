"""Issue 13: one run owns a checkpoint folder. A second job started on the folder of a live one fails before it trains,
on every rank, naming the owner; the first job finishes and every one of its checkpoints is intact. A job started again
after the first one ended (a requeue) takes the folder over. Real processes: tests/scripts/train_ckpt.py on 2 ranks."""
from __future__ import annotations
import shutil, tempfile
from pathlib import Path
import pytest
from ddpsafe.storage.manifest import checkpoints, check_checkpoint
from conftest import train_ckpt
tc = train_ckpt()

@pytest.mark.timeout(400)
def test_second_run_on_a_live_folder_fails_fast(tmp_path):
    first = tc.launch(tmp_path, 4, '--fit', 'fit', '--every-steps', '2', '--slow', '2.5', '--keep', '50')   # ~30 s of training
    try:
        assert tc.wait_for(first, 0, r'STEP 2', timeout=120), 'the first run never reached step 2:\n' + first.output(0)[-3000:]
        codes, outs, res = tc.run(tmp_path, 3, '--fit', 'fit', '--keep', '50', timeout=120)
    finally: codes1, outs1, res1 = tc.finish(first, timeout=240)
    assert codes == [1, 1], f'the second run was not refused: {codes}\n' + outs[0][-3000:]
    for r in res:
        assert r['error'].startswith('FolderInUse') and 'pid' in r['error'] and str(tmp_path/'checkpoints') in r['error'], r['error']
        assert r['steps'] == 0, f'the second run trained {r["steps"]} steps before it was refused'
    assert res[0]['error'] == res[1]['error'], 'the ranks were told different things'
    assert codes1 == [0, 0], f'the first run failed: {codes1}\n' + outs1[0][-3000:]
    cks = checkpoints(tmp_path/'checkpoints')
    assert [check_checkpoint(p) for p in cks] == [[]]*len(cks) and len(cks) >= 6, [p.name for p in cks]

@pytest.mark.timeout(300)
def test_run_after_the_owner_ended_takes_over(tmp_path):
    codes, outs, _ = tc.run(tmp_path, 2, '--fit', 'fit', '--kill', 'SIGKILL:0:3', timeout=120)   # the owner dies
    assert codes[0] != 0
    codes, outs, res = tc.run(tmp_path, 2, '--fit', 'fit', timeout=120)
    assert codes == [0, 0], outs[0][-3000:]
    assert 'taking over the folder' in outs[0], outs[0][-3000:]
