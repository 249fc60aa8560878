"""Write the fixture checkpoints of `tests/test_old_checkpoints.py` with an older ddpsafe: run it with that ddpsafe first on
the path, e.g. for main 0db8280 and main 9c5e351 (the two sets in `tests/fixtures/`):

    git worktree add /tmp/old-0db8280 0db8280
    PYTHONPATH=/tmp/old-0db8280 python tests/scripts/old_checkpoints.py /tmp/old-0db8280 tests/fixtures/ckpt-0db8280
    git worktree add /tmp/old-9c5e351 9c5e351
    PYTHONPATH=/tmp/old-9c5e351 python tests/scripts/old_checkpoints.py /tmp/old-9c5e351 tests/fixtures/ckpt-9c5e351

For each scenario of `SCENARIOS`, `OLD/tests/scripts/train_ckpt.py` (the old script, on 2 ranks) is stopped as named; the
newest complete checkpoint is kept (the others removed, with the folder's owner record), and the final weights of rank 0
of an uninterrupted run of the same old code go beside it (`whole.pt`), with the versions in `info.json`.

Every rank runs with the CPU kernels pinned as this tree's `train_ckpt.py` pins them (`PINNED_KERNELS`: aten's default
kernels, MKL's COMPATIBLE path, one thread), so that the training, and so `whole.pt`, is the same bit for bit on any x86
CPU. The old script builds its ranks' environment itself, without the pin, on top of this process's: the pin is set in
this process's environment, which the ranks inherit, and written to `info.json` (`env`)."""
import os, sys, json, shutil, importlib.util
from pathlib import Path

SCENARIOS = {   # name: (fit, stop arguments); 4 epochs of 3 steps per rank
    'fit-sigterm-step5': ('fit', ['--kill', 'SIGTERM:0:4']),          # mid-epoch: epoch 1, after batch 2 of 3
    'one_cycle-switch-step3': ('one_cycle', ['--touch', 'stop-now:2']),  # the last batch of epoch 0
}
N_EPOCH = 4

def pinned_kernels() -> dict:
    "This tree's `train_ckpt.PINNED_KERNELS` (the old script may have none)"
    spec = importlib.util.spec_from_file_location('new_train_ckpt', Path(__file__).resolve().parent/'train_ckpt.py')
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return dict(m.PINNED_KERNELS)

def main(old:str, out:str):
    old, out = Path(old).resolve(), Path(out).resolve()
    env = pinned_kernels()
    os.environ.update(env)         # before torch is imported; the old ranks inherit it
    spec = importlib.util.spec_from_file_location('old_train_ckpt', old/'tests'/'scripts'/'train_ckpt.py')
    tc = importlib.util.module_from_spec(spec); spec.loader.exec_module(tc)
    import torch, ddpsafe, fastai
    assert Path(ddpsafe.__file__).resolve().is_relative_to(old), f'{ddpsafe.__file__}: run with PYTHONPATH={old}'
    from ddpsafe.storage.manifest import newest_complete, checkpoints
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
                                                   torch=torch.__version__, fastai=fastai.__version__, python=sys.version.split()[0], env=env), indent=1) + '\n')
        print(name, ck.name, sum(f.stat().st_size for f in d.rglob('*') if f.is_file()), 'bytes')

if __name__ == '__main__': main(*sys.argv[1:])
