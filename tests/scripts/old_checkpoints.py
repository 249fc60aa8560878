"""Write the fixture checkpoints of `tests/test_old_checkpoints.py` with an older ddpsafe: run it with that ddpsafe first on
the path, e.g. for main 0db8280:

    git worktree add /tmp/oldmain 0db8280
    PYTHONPATH=/tmp/oldmain python tests/scripts/old_checkpoints.py /tmp/oldmain tests/fixtures/ckpt-0db8280

For each scenario of `SCENARIOS`, `OLD/tests/scripts/train_ckpt.py` (the old script, on 2 ranks) is stopped as named; the
newest complete checkpoint is kept (the others removed, with the folder's owner record), and the final weights of rank 0
of an uninterrupted run of the same old code go beside it (`whole.pt`), with the versions in `info.json`."""
import sys, json, shutil, importlib.util
from pathlib import Path

SCENARIOS = {   # name: (fit, stop arguments); 4 epochs of 3 steps per rank
    'fit-sigterm-step5': ('fit', ['--kill', 'SIGTERM:0:4']),          # mid-epoch: epoch 1, after batch 2 of 3
    'one_cycle-switch-step3': ('one_cycle', ['--touch', 'stop-now:2']),  # the last batch of epoch 0
}
N_EPOCH = 4

def main(old:str, out:str):
    old, out = Path(old).resolve(), Path(out).resolve()
    spec = importlib.util.spec_from_file_location('old_train_ckpt', old/'tests'/'scripts'/'train_ckpt.py')
    tc = importlib.util.module_from_spec(spec); spec.loader.exec_module(tc)
    import torch, ddpsafe, fastai
    assert Path(ddpsafe.__file__).resolve().is_relative_to(old), f'{ddpsafe.__file__}: run with PYTHONPATH={old}'
    from ddpsafe.manifest import newest_complete, checkpoints
    for name, (fit, stop) in SCENARIOS.items():
        d = out/name
        shutil.rmtree(d, ignore_errors=True); d.mkdir(parents=True)
        codes, outs, res = tc.run(d, N_EPOCH, '--fit', fit, *stop, '--keep', '1')
        assert res[0] and res[1], outs
        ck = newest_complete(d/'checkpoints')
        for p in (d/'checkpoints').iterdir():
            if p != ck: shutil.rmtree(p) if p.is_dir() else p.unlink()
        codes, outs, res = tc.run(out/'whole', N_EPOCH, '--fit', fit, '--out', out/'whole'/'w')
        assert codes == [0, 0], outs
        shutil.copy(out/'whole'/'w.rank0', d/'whole.pt'); shutil.rmtree(out/'whole')
        (d/'info.json').write_text(json.dumps(dict(fit=fit, stop=stop, n_epoch=N_EPOCH, checkpoint=ck.name, ddpsafe=ddpsafe.__version__,
                                                   torch=torch.__version__, fastai=fastai.__version__, python=sys.version.split()[0]), indent=1) + '\n')
        print(name, ck.name, sum(f.stat().st_size for f in d.rglob('*') if f.is_file()), 'bytes')

if __name__ == '__main__': main(*sys.argv[1:])
