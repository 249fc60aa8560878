"""How much a background checkpoint write slows bare torch training steps beside it (a CPU MLP step, no fastai): steps alone
(A) and while one save of a `--size` MB state is written (B), alternately; the ratio of B's median step to A's, paired per
repetition. `--mode thread`: ddpsafe's `AsyncWriter` thread; `--mode process`: a forked child (the same write without
the GIL). Method: the benchmarks page, "Training beside a background write".

    python bench/async_step_bench.py --mode thread --threads 1 --reps 9   # -> results/async_step_thread_1threads.json
    python bench/async_step_bench.py --mode process --threads 2           # -> results/async_step_process_2threads.json"""
from __future__ import annotations
import os, sys, time, argparse, platform, statistics, tempfile, shutil
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, make_state, load, wait_quiet, trim, write_json, now

def trainer(width:int=1024, batch:int=256):
    "A training step of an MLP: forward, backward, Adam"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = torch.randn(batch, width), torch.randn(batch, 1)
    def step():
        opt.zero_grad(); torch.nn.functional.mse_loss(model(x), y).backward(); opt.step()
    return step

def timed_steps(step, n:int|None=None, until=None) -> list:
    "Step times: `n` steps, or steps until `until()` is true"
    out = []
    while (n is not None and len(out) < n) or (until is not None and not until()):
        t0 = time.perf_counter(); step(); out.append(time.perf_counter() - t0)
    return out

def in_child(write, step, t0, nice=None) -> tuple:
    "Run `write` in a forked child (at niceness `nice`) while timing steps here: (step times, seconds until the child exited)"
    pid = os.fork()
    if pid == 0:
        try:
            if nice is not None: os.setpriority(os.PRIO_PROCESS, 0, nice)
            write(); os._exit(0)
        except BaseException: os._exit(1)
    done = []
    def finished():
        if not done and os.waitpid(pid, os.WNOHANG)[0]: done.append(time.perf_counter() - t0)
        return bool(done)
    during = timed_steps(step, until=finished)
    return during, done[0]

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--size', type=int, default=500, help='checkpoint state size in MB (default 500)')
    p.add_argument('--reps', type=int, default=5, help='paired repetitions (default 5)')
    p.add_argument('--baseline-steps', type=int, default=40, help='steps timed with no save in flight per repetition')
    p.add_argument('--dir', default=None, help='where the checkpoints are written (default: a temporary folder)')
    p.add_argument('--out', default=str(HERE/'results'), help='folder for async_step.json')
    p.add_argument('--mode', choices=('thread', 'process'), default='thread', help='write on a thread (ddpsafe) or a forked process')
    p.add_argument('--threads', type=int, default=None, help="torch's intra-op threads for training (default: torch's own, one per core)")
    p.add_argument('--quiet', type=float, default=30., help='wait up to this many seconds for CPU pressure below 50%% before each repetition')
    p.add_argument('--nice', type=int, default=19, help="the writer's niceness (default 19, AsyncWriter's); -1: the process's own")
    a = p.parse_args()
    nice = None if a.nice < 0 else a.nice
    if a.threads: torch.set_num_threads(a.threads)
    from ddpsafe.snapshot import StateBuffers, AsyncWriter
    from ddpsafe.parts import checkpoint_writers
    from ddpsafe.manifest import write_checkpoint
    folder = Path(a.dir or tempfile.mkdtemp(prefix='ddpsafe-bench-'))
    folder.mkdir(parents=True, exist_ok=True)
    state, step = make_state(a.size * 2**20), trainer()
    bufs, writer = StateBuffers(), AsyncWriter(nice=nice)
    timed_steps(step, 10)                                     # warm-up
    reps = []
    for r in range(a.reps):
        waited = wait_quiet(a.quiet)
        base = timed_steps(step, a.baseline_steps)
        snap = bufs.copy(state)                               # the blocking copy: measured by checkpoint_bench, not here
        root = folder/f'rep-{r}'
        t0 = time.perf_counter()
        write = lambda: write_checkpoint(root, r, checkpoint_writers({'model.safetensors': snap['model'], 'optimizer.pt': snap['opt'], 'state.pt': {}, 'rng.pt': []}), {})
        if a.mode == 'thread':
            writer.submit(write)
            during = timed_steps(step, until=lambda: not writer.busy)
            write_s = time.perf_counter() - t0
            if (err := writer.wait()) is not None: raise err
        else:
            during, write_s = in_child(write, step, t0, nice)
        shutil.rmtree(root, ignore_errors=True); trim()
        rep = dict(baseline_median=statistics.median(base), during_median=statistics.median(during), steps_during=len(during),
                   write_s=write_s, waited_for_quiet_s=round(waited, 1), load=load())
        rep['ratio'] = rep['during_median'] / rep['baseline_median']
        reps.append(rep)
        print(f"rep {r+1}/{a.reps}: step {rep['baseline_median']*1e3:.1f} ms alone, {rep['during_median']*1e3:.1f} ms during a "
              f"{a.size} MB write ({len(during)} steps, {write_s:.2f} s): x{rep['ratio']:.2f}", flush=True)
    ratios = [r['ratio'] for r in reps]
    summary = dict(min=min(ratios), median=statistics.median(ratios), max=max(ratios), goal='<= 1.05', met=statistics.median(ratios) <= 1.05)
    print(f"{a.mode}, {torch.get_num_threads()} training threads: step time during a background write / alone: min {summary['min']:.2f}, median {summary['median']:.2f}, "
          f"max {summary['max']:.2f} (goal <= 1.05: {'met' if summary['met'] else 'MISSED'})")
    res = dict(date=now(), command=' '.join(sys.argv),
               machine=dict(platform=platform.platform(), cpus=os.cpu_count(), torch=torch.__version__, threads=torch.get_num_threads()),
               size_mb=a.size, mode=a.mode, writer_nice=nice, reps=reps, summary=summary)
    write_json(Path(a.out)/f'async_step_{a.mode}_{torch.get_num_threads()}threads.json', res)
    if a.dir is None: shutil.rmtree(folder, ignore_errors=True)

if __name__ == '__main__': main()
