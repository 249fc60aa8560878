"""One rank of a checkpointed fastai training run, started once per rank like `torchrun` would (`ddpsafe.testing.launch_ranks`).

Used by `tests/test_checkpoint.py` (issue 4) and `tests/test_preempt.py` (issue 5).

    python train_ckpt.py PATH N_EPOCH [--fit one_cycle|fit|fine_tune] [--every-steps N] [--every-epoch N] [--keep N]
                         [--slow SECS] [--poll-seconds SECS] [--accum N] [--model-mb MB] [--out FILE] [--touch NAME:STEP] [--kill SIG:RANK:STEP]
                         [--exit-code N|none] [--best-max] [--no-resume] [--trace-fs] [--fsdp] [--start-out FILE] [--stall-shards STEP] [--fp16] [--nccl] ...

`PATH` is the learner's path; checkpoints go to `PATH/checkpoints`. The run is `synth_learner(path=PATH, seed=0)` (a
bigger MLP on the same synthetic data with `--model-mb`), trained inside `learn.distrib_ctx()` (`learn.fsdp_ctx()` with `--fsdp`) with a
`CheckpointCallback`. Each rank prints marker lines, flushed at once, that the tests read:

    FIT i START                      before fit i's first batch (the signal handlers are installed)
    STEP g                           after optimizer step g (global over the script's fits), before the per-step sleep
    SAVE-BEGIN g reason / SAVE-END g reason saved|skipped    around every `CheckpointCallback.save`
    SHARDS-WRITTEN g                 with `--stall-shards g`, on rank 1: its shards of step g are written (it then sleeps)
    RESULT {json}                    last: rank, exit code, steps done, how the run stopped, the error if any

`--out FILE` writes this rank's final weights (`torch.save` of the state_dict) to `FILE.rank{r}`; `--start-out FILE` the
unwrapped model's weights and the optimizer's state as the fit starts (after a resume) to `FILE.rank{r}`.
The exit code is the callback's (`REQUEUE_EXIT_CODE`=75 after a signal), 0 at the end, 1 on an error.

The second half of this file holds test-side helpers (launching, parsing, a cache of uninterrupted runs); they import
nothing heavy, and the script part never uses them."""
from __future__ import annotations
import os, sys, json, time, atexit, signal, shutil, argparse, tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve()

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('path'); p.add_argument('n_epoch', type=int)
    p.add_argument('--fit', default='one_cycle', choices=['one_cycle', 'fit', 'fine_tune'])
    p.add_argument('--every-steps', type=int, default=None)
    p.add_argument('--every-epoch', type=int, default=1, help='0: never')
    p.add_argument('--keep', type=int, default=3)
    p.add_argument('--slow', type=float, default=0., help='seconds to sleep after every optimizer step')
    p.add_argument('--poll-seconds', type=float, default=0., help="CheckpointCallback's poll_seconds")
    p.add_argument('--accum', type=int, default=1, help="fastai's GradientAccumulation over this many batches (1: none)")
    p.add_argument('--model-mb', type=float, default=0., help='an MLP with about this many MB of weights instead of Linear(4,1)')
    p.add_argument('--out', default=None)
    p.add_argument('--start-out', default=None, help="FILE: write the weights and optimizer state the fit starts from (after a resume) to FILE.rank{r}")
    p.add_argument('--touch', action='append', default=[], help='NAME:STEP: rank 0 creates PATH/checkpoints/NAME after global step STEP')
    p.add_argument('--kill', action='append', default=[], help='SIG:RANK:STEP: rank RANK sends itself SIG after global step STEP')
    p.add_argument('--exit-code', default='75')
    p.add_argument('--best-max', action='store_true', help='the best checkpoint is the one with the highest valid_loss')
    p.add_argument('--no-resume', action='store_true')
    p.add_argument('--trace-fs', action='store_true', help='print every shutil.rmtree of a checkpoint folder')
    p.add_argument('--async-save', action='store_true', help="CheckpointCallback's async_save")
    p.add_argument('--local', default=None, help="CheckpointCallback's local: a folder in PATH committed to first, then uploaded to --ckpt")
    p.add_argument('--fsdp', action='store_true', help='train inside learn.fsdp_ctx() (FSDP2) instead of distrib_ctx (DDP)')
    p.add_argument('--stall-shards', type=int, default=None, help='STEP: rank 1 prints SHARDS-WRITTEN STEP once its shards of that step are written, then sleeps')
    p.add_argument('--ckpt', default='checkpoints', help="CheckpointCallback's path: a folder in PATH, or a URL (credentials from AWS_*)")
    p.add_argument('--nccl', action='store_true', help='start the process group with NCCL on cuda:LOCAL_RANK (also with one process)')
    p.add_argument('--fp16', action='store_true', help="fastai's mixed precision (learn.to_fp16(): a GradScaler on CUDA)")
    return p.parse_args(argv)

def say(*a): print(*a, flush=True)

def main(argv=None) -> int:
    a = parse_args(argv)
    t0 = time.time()
    import torch, torch.distributed as dist
    from datetime import timedelta
    world = int(os.environ.get('WORLD_SIZE', '1'))
    if a.nccl:                         # the GPU's own backend, as on a cluster (one process per GPU)
        torch.cuda.set_device(int(os.environ.get('LOCAL_RANK', 0)))
        dist.init_process_group('nccl', timeout=timedelta(seconds=float(os.environ.get('DDPSAFE_TIMEOUT', 1800))))
    elif world > 1 and not dist.is_initialized():
        dist.init_process_group('gloo', timeout=timedelta(seconds=float(os.environ.get('DDPSAFE_TIMEOUT', 1800))))
    if a.nccl: say(f'PROCESS GROUP backend {dist.get_backend()} device {"cuda:%d" % torch.cuda.current_device() if torch.cuda.is_available() else "cpu"}')
    import numpy as np
    import fastai.callback.schedule     # fit_one_cycle, fine_tune
    import fastai.distributed           # distrib_ctx
    from fastai.learner import Learner
    from fastai.losses import MSELossFlat
    from fastai.torch_core import set_seed
    from fastai.callback.progress import ProgressCallback
    import ddpsafe.callback.checkpoint
    from ddpsafe.callback.checkpoint import CheckpointCallback, run_state
    from ddpsafe.dist.collectives import rank
    from ddpsafe.testing import synth_learner, synth_dls
    r = rank()
    if a.trace_fs:
        stock_rmtree = shutil.rmtree
        def rmtree(path, *args, **kwargs):
            if 'step-' in Path(path).name: say(f'RMTREE rank {r} {path}')
            return stock_rmtree(path, *args, **kwargs)
        shutil.rmtree = rmtree

    if a.model_mb:
        set_seed(0)
        h = max(1, int(a.model_mb * 2**20 / 4 / 6))        # 4h+h weights+biases in, h+1 out
        model = torch.nn.Sequential(torch.nn.Linear(4, h), torch.nn.ReLU(), torch.nn.Linear(h, 1))
        learn = Learner(synth_dls(seed=0, path=a.path), model, loss_func=MSELossFlat(), lr=1e-2, path=a.path)
    else: learn = synth_learner(path=a.path, seed=0)
    learn.remove_cb(ProgressCallback)          # no progress bars: the marker lines stay whole
    if a.fp16:
        import fastai.callback.fp16
        learn.to_fp16()

    if a.stall_shards is not None and r == 1:
        from ddpsafe.storage.commit import temporary_of
        from ddpsafe.storage.manifest import checkpoint_step
        import ddpsafe.state.sharded
        write_shards = ddpsafe.state.sharded.write_shards
        def stalled(state, folder, group=None):
            out = write_shards(state, folder, group)
            if checkpoint_step(temporary_of(folder)[0]) == a.stall_shards:
                say(f'SHARDS-WRITTEN {a.stall_shards}'); time.sleep(600)
            return out
        ddpsafe.state.sharded.write_shards = stalled      # what `write_in_shards` calls

    touches = [(n, int(s)) for n, s in (o.rsplit(':', 1) for o in a.touch)]
    kills = [(getattr(signal, sg), int(rk), int(s)) for sg, rk, s in (o.split(':') for o in a.kill)]

    class TracedCheckpoint(CheckpointCallback):
        "`CheckpointCallback` that prints what it does, and creates switch files / sends signals at given steps"
        def before_fit(self):
            super().before_fit()
            self.seen = self.sequence   # the folder's fits in this process: `_close` lets go of it
            say(f'FIT {self.progress.fit_idx} START steps_before={self.progress.steps_before}')
            if a.nccl: say(f'DEVICES model {next(self.model.parameters()).device} data {self.dls.train.device}')
            if a.start_out:            # whole tensors on every rank, gathered from the shards under FSDP
                from fastai.torch_core import get_model
                from torch.distributed.tensor import DTensor
                from ddpsafe.state.sharded import full_optimizer_state
                whole = lambda v: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
                torch.save(dict(model={k: whole(v) for k, v in get_model(self.model).state_dict().items()},
                                opt=full_optimizer_state(self.learn.opt.state_dict(), everywhere=True)), f'{a.start_out}.rank{r}')
        def after_batch(self):
            if self.training:
                g = self.progress.steps_before + self.train_iter
                for name, s in touches:
                    if s == g and r == 0: (self.root/name).write_bytes(b"")
                for sg, rk, s in kills:
                    if s == g and rk == r: os.kill(os.getpid(), sg)
                say(f'STEP {g}')
            try: super().after_batch()
            finally:
                if self.training and a.slow: time.sleep(a.slow)
        def save(self, reason='request', **kwargs):
            g = self.position()['global_step']
            say(f'SAVE-BEGIN {g} {reason} {time.time():.3f}')
            done = super().save(reason, **kwargs)
            say(f'SAVE-END {g} {reason} {"saved" if done else "skipped"} {time.time():.3f}')
            return done

    cb = TracedCheckpoint(a.ckpt, every_epoch=a.every_epoch or None, every_steps=a.every_steps, keep=a.keep, resume=not a.no_resume,
                          poll_seconds=a.poll_seconds, async_save=a.async_save, local=a.local,
                          comp=np.greater if a.best_max else None,
                          exit_code=None if a.exit_code == 'none' else int(a.exit_code))
    res = dict(rank=r, world=world, code=0, error=None)
    cbs = [cb]
    if a.accum > 1:
        from fastai.callback.training import GradientAccumulation
        cbs.append(GradientAccumulation(n_acc=a.accum*learn.dls.bs))   # counts items: `accum` batches a step
    try:
        with (learn.fsdp_ctx() if a.fsdp else learn.distrib_ctx()):
            if a.fit == 'one_cycle': learn.fit_one_cycle(a.n_epoch, 1e-2, cbs=cbs)
            elif a.fit == 'fit': learn.fit(a.n_epoch, 1e-2, cbs=cbs)
            else: learn.fine_tune(a.n_epoch, 1e-2, freeze_epochs=1, cbs=cbs)
    except SystemExit as e: res['code'] = e.code if isinstance(e.code, int) else 1
    except BaseException as e:
        res.update(code=1, error=f'{type(e).__name__}: {e}', error_time=time.time())
        import traceback; traceback.print_exc()
    seq = getattr(cb, 'seen', None)   # the folder's fits in this process, and their steps
    res.update(steps=seq.steps if seq else 0, train_iter=getattr(learn, 'train_iter', None),
               stopped_by=getattr(cb, 'stopped_by', None), fits=seq.fits if seq else 0,
               metric_names=list(learn.recorder.metric_names[1:-1]),
               values=[[None if x is None else float(x) for x in row] for row in learn.recorder.values],
               seconds=round(time.time()-t0, 2), device=str(next(learn.model.parameters()).device))
    if a.out and res['error'] is None:
        torch.save({k: v.detach().clone() for k, v in learn.model.state_dict().items()}, f'{a.out}.rank{r}')
    say('RESULT ' + json.dumps(res))
    if dist.is_initialized(): dist.destroy_process_group()     # as PyTorch asks scripts to do at the end
    return res['code']

# ---------------------------------------------------------------------------------------------------------------
# Test-side helpers (imported by the tests; the script above never uses them)

def results(outputs:list) -> list:
    "Each rank's `RESULT` dict from what it printed (`None` where there is none)"
    out = []
    for o in outputs:
        lines = [l for l in o.splitlines() if l.startswith('RESULT ')]
        out.append(json.loads(lines[-1][7:]) if lines else None)
    return out

def markers(output:str, kind:str) -> list:
    "The marker lines of one kind (`STEP`, `SAVE-BEGIN`, ...) in a rank's output, split into words"
    return [l.split()[1:] for l in output.splitlines() if l.startswith(kind + ' ')]

def wait_for(procs, r:int, pattern:str, timeout:float=120, count:int=1) -> bool:
    "Has rank `r` printed `count` lines matching `pattern` (whole lines) before a rank ended and within `timeout`?"
    import re
    from ddpsafe.testing import wait_until, WaitTimeout
    rx = re.compile(f'^{pattern}$', re.M)
    seen = lambda: len(rx.findall(procs.output(r))) >= count
    try: wait_until(lambda: seen() or any(p.poll() is not None for p in procs.procs), timeout,
                    f'{count} line(s) {pattern!r} in its output', rank=r, every=0.01)
    except WaitTimeout: return False
    return seen()

# The CPU kernels every rank is pinned to, so that the same training gives the same weights, bit for bit, on any x86 CPU
# (which `tests/test_old_checkpoints.py` needs of checkpoints written on another machine). Unpinned, aten dispatches its
# vectorized kernels (the loss's and the bias gradient's sums) by the CPU (AVX-512, AVX2, default), and MKL its SGEMM
# (`Linear` -> addmm/mm) by the CPU too: either changes the last bits of the weights. `ATEN_CPU_CAPABILITY=default`:
# aten's kernels built for baseline x86-64, on every CPU; `MKL_CBWR=COMPATIBLE`: MKL's conditional numerical
# reproducibility, one code path on every Intel-compatible CPU (harmless where torch has no MKL); one thread: no
# result depends on the machine's core count. `old_checkpoints.py` sets the same in its own environment for the old code.
PINNED_KERNELS = {'ATEN_CPU_CAPABILITY': 'default', 'MKL_CBWR': 'COMPATIBLE', 'OMP_NUM_THREADS': '1'}

def run_env(**extra) -> dict:
    return {'DDPSAFE_TIMEOUT': '60', 'PYTHONUNBUFFERED': '1', 'PYTHONWARNINGS': 'always::UserWarning', **PINNED_KERNELS, **extra}

def launch(path, n_epoch:int, *args, n:int=2, env=None):
    "Start the script on `n` ranks (`launch_ranks`); the `RankProcs`"
    from ddpsafe.testing import launch_ranks
    return launch_ranks(SCRIPT, n=n, args=[path, n_epoch, *args], env=run_env(**(env or {})))

def finish(procs, timeout:float=120) -> tuple:
    "Wait for `procs` (`RanksFailed` on a hang); (exit codes, outputs, results)"
    codes = procs.wait(timeout)
    outs = [procs.output(r) for r in range(procs.n)]
    shutil.rmtree(procs.tmp, ignore_errors=True)
    return codes, outs, results(outs)

def run(path, n_epoch:int, *args, n:int=2, timeout:float=120, env=None) -> tuple:
    "Run the script to the end on `n` ranks: (exit codes, outputs, results)"
    return finish(launch(path, n_epoch, *args, n=n, env=env), timeout)

def weights(out, n:int=2) -> list:
    "The final weights every rank wrote with `--out out`"
    import torch
    return [torch.load(f'{out}.rank{r}', weights_only=True) for r in range(n)]

def same(a:dict, b:dict) -> bool:
    "Bit for bit equal state dicts"
    import torch
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

_baselines = {}
def baseline(n_epoch:int, *args, extra=('--keep', '50'), timeout:float=120) -> list:
    """Final weights (one per rank) of an uninterrupted 2-rank run with training arguments `args`; run once per test session.
    `extra` (not part of the cache key) must not change the training: by default every checkpoint is kept"""
    key = (n_epoch, *map(str, args))
    if key not in _baselines:
        d = Path(tempfile.mkdtemp(prefix='ddpsafe-baseline-'))
        atexit.register(shutil.rmtree, d, ignore_errors=True)
        codes, outs, res = run(d, n_epoch, *args, *extra, '--out', d/'w', timeout=timeout)
        assert codes == [0, 0], f'uninterrupted run failed: {codes}\n' + '\n'.join(o[-3000:] for o in outs)
        _baselines[key] = dict(weights=weights(d/'w'), path=d, results=res)
    return _baselines[key]['weights']

def baseline_run(n_epoch:int, *args, extra=('--keep', '50'), timeout:float=120) -> dict:
    "The whole record of the cached uninterrupted run: weights, its folder (checkpoints included), results"
    baseline(n_epoch, *args, extra=extra, timeout=timeout)
    return _baselines[(n_epoch, *map(str, args))]

def load_helpers():
    "This file as a module, the same one for every test file"
    return sys.modules[__name__]

if __name__ == '__main__': sys.exit(main())
