"""How long a checkpoint blocks training, and how long until it is on disk: ddpsafe (sync, async, the memory tier) against
the machine's limits (`memcpy`, `clone`, `raw_write`) and against `torch.save`, safetensors and DCP (`dcp_save`, `dcp_async`,
`dcp_async_cached`), on `harness.make_state` states (weights and Adam state, 51 fp32 tensors); one warm-up repetition, then
every method once a repetition in a rotated order, ratios paired within a repetition. `ddpsafe_async` also records what
async saves hold in host memory (their slots in /dev/shm, the writer process's own pages). Method: the benchmarks page,
"Checkpoints: blocking time and time to disk" and "Host memory of asynchronous saves", which draws the figures.

    python bench/checkpoint_bench.py --sizes 100,500,2000 --reps 7   # -> bench/results/checkpoint.json
    python bench/checkpoint_bench.py --device cuda --sizes 1000,4000 --reps 3   # a state on the GPU -> checkpoint_cuda.json"""
from __future__ import annotations
import os, sys, json, time, shutil, argparse, warnings, statistics
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, make_state, tensors, flat, nbytes, fsync_file, load, wait_quiet, trim, machine, now, rotated, sync, device_facts, command
from ddpsafe.state.parts import rng_state; from ddpsafe.files.codec import checkpoint_writers; from ddpsafe.storage.manifest import write_checkpoint, Retention
from ddpsafe.write.slot_copy import SlotPipe
from ddpsafe.write.slots import slots_home
from ddpsafe.write.memory import MemoryTier

class Bench:
    "The methods: each returns (blocking seconds, total seconds, extra details)"
    def __init__(self, state, folder:Path, device=torch.device('cpu')):
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
        self.state, self.folder, self.flat, self.device = state, folder, flat(state), device
        self.bufs = [torch.empty(t.shape, dtype=t.dtype, pin_memory=device.type == 'cuda') for t in tensors(state)]   # memcpy's reused host buffers
        self.shm = slots_home()/f'ddpsafe-bench-{os.getpid()}'
        self.pipe = SlotPipe(self.shm/'async', 1, keep_newest=False).start(say=lambda *a: None)   # the async saves' slot and writer process, as `Saver` makes them
        self.pipe.reserve(state)
        self.tier = MemoryTier(self.shm/'memory', every_steps=1, keep=2)   # the memory tier alone: its own slots, no writer
        self.tier.reserve(state)                                             # its slots made ahead, as a fit's first step has them made
        self.stager = DefaultStager(StagingOptions(False, False, False, False))
        self.rngs = [rng_state()]
        self.meta = dict(epoch=0, iter=1, epoch_done=False, reason='steps', world_size=1, monitor='valid_loss', metric=None)
        self.ckstate = dict(epoch=0, iter=1, train_iter=1000, global_step=1000, world_size=1)   # state.pt: small
        self.n = 0

    def target(self, name) -> Path:
        self.n += 1
        return self.folder/f'{name}-{self.n}'

    def memcpy(self):
        "Into reused host buffers: the floor of a snapshot (from a device: a copy into pinned memory)"
        t0 = time.perf_counter()
        for b, t in zip(self.bufs, tensors(self.state)): b.copy_(t, non_blocking=True)
        sync(self.device)
        dt = time.perf_counter() - t0
        return dt, dt, {}

    def clone(self):
        t0 = time.perf_counter()
        c = [t.clone() for t in tensors(self.state)]
        dt = time.perf_counter() - t0
        del c
        return dt, dt, {}

    def _to_disk(self, name, write):
        "`write` a file, then fsync it: the seconds of both, and of the fsync"
        p = self.target(name)
        t0 = time.perf_counter(); write(p); t1 = time.perf_counter()
        fsync_file(p)
        dt = time.perf_counter() - t0
        return dt, dt, dict(fsync=time.perf_counter() - t1)

    def raw_write(self):
        def write(p):
            with open(p, 'wb', buffering=0) as f:
                for t in tensors(self.state): f.write(memoryview(t.numpy()).cast('B'))
        return self._to_disk('raw', write)

    def _files(self, state) -> dict: return {'model.safetensors': state['model'], 'optimizer.pt': state['opt'], 'state.pt': self.ckstate, 'rng.pt': self.rngs}

    def _ddpsafe_files(self, snap, timings=None):
        files = checkpoint_writers(self._files(snap))
        if timings is None: return files
        def timed(name, w):
            def write(p):
                t0 = time.perf_counter(); w(p); timings[name] = time.perf_counter() - t0
            return write
        return {k: timed(k, w) for k, w in files.items()}

    def ddpsafe_sync(self):
        timings = {}
        t0 = time.perf_counter()
        write_checkpoint(self.target('ddpsafe-sync'), 1000, self._ddpsafe_files(self.state, timings), self.meta)
        dt = time.perf_counter() - t0
        return dt, dt, dict(writers=timings, fsync_checksums_manifest=dt - sum(timings.values()))

    def ddpsafe_async(self):
        "As `CheckpointCallback(async_save=True)` saves: the state copied into a slot in /dev/shm and sealed (blocking), committed by the writer process"
        root, done = self.target('ddpsafe-async'), []
        c0, t0 = time.process_time(), time.perf_counter()
        slot = self.pipe.ring.fill(1000, self._files(self.state), self.meta)
        t1 = time.perf_counter()
        self.pipe.hand(slot, root, 1000, Retention(3), done.append)
        t2, c2 = time.perf_counter(), time.process_time()
        self.pipe.poll(None)
        t3 = time.perf_counter()
        if (err := self.pipe.take_error()) is not None: raise err
        if not done: raise RuntimeError(f'the writer process (pid {self.pipe.writer.pid}) did not commit {root}')
        return t2 - t0, t3 - t0, dict(copy=t1 - t0, hand=t2 - t1, write=self.pipe.seconds, blocking_cpu=c2 - c0, **self.host_memory())

    def host_memory(self) -> dict:
        "What async saves hold in host memory: the slots' pages in /dev/shm, and the writer process's own (anonymous) pages"
        slots = sum(f.stat().st_blocks*512 for f in self.pipe.folder.glob('slot-*/data'))
        status = Path(f'/proc/{self.pipe.writer.pid}/status').read_text().splitlines()
        return dict(slots_bytes=slots, writer_anon_bytes=int(next(l for l in status if l.startswith('RssAnon:')).split()[1])*1024)

    def memory_tier(self):
        "As `CheckpointCallback(memory_every_steps=N)` saves: `ready`, the state copied into a slot and sealed; the slot is the checkpoint, nothing is written after"
        self.n += 1
        t0 = time.perf_counter()
        if self.tier.ready(self.n): self.tier.save(self.n, self._files(self.state), self.meta)
        dt = time.perf_counter() - t0
        if self.tier.off or self.tier.holds()[-1][0] != self.n: raise RuntimeError(f'the memory tier ({self.tier.folder}) did not take step {self.n}')
        return dt, dt, {}

    def torch_save(self): return self._to_disk('torch.pt', lambda p: torch.save(self.state, p))

    def safetensors(self):
        import safetensors.torch as st
        return self._to_disk('st.safetensors', lambda p: st.save_file(self.flat, str(p)))

    def dcp_save(self):
        import torch.distributed.checkpoint as dcp
        t0 = time.perf_counter()
        dcp.save(self.state, checkpoint_id=self.target('dcp'))
        dt = time.perf_counter() - t0
        return dt, dt, {}

    def _dcp_async(self, **kwargs):
        import torch.distributed.checkpoint as dcp
        t0 = time.perf_counter()
        res = dcp.async_save(self.state, checkpoint_id=self.target('dcp-async'), **kwargs)
        t1 = time.perf_counter()
        if hasattr(res, 'staging_completion'): res.staging_completion.result(); t1 = time.perf_counter(); res = res.upload_completion
        res.result()
        return t1 - t0, time.perf_counter() - t0, {}

    def dcp_async(self): return self._dcp_async()
    def dcp_async_cached(self): return self._dcp_async(async_stager=self.stager)

    def close(self):
        try: self.pipe.close(); self.tier.close(); self.stager.close()
        finally: shutil.rmtree(self.shm, ignore_errors=True)

METHODS = ['memcpy', 'clone', 'raw_write', 'ddpsafe_sync', 'ddpsafe_async', 'memory_tier', 'torch_save', 'safetensors',
           'dcp_save', 'dcp_async', 'dcp_async_cached']
DEVICE_METHODS = ['memcpy', 'ddpsafe_async', 'memory_tier', 'dcp_async', 'torch_save']   # `--device cuda`'s default: what a GPU's state is saved with

def measure_size(mb:int, reps:int, root:Path, settle:float=0.2, quiet:float=0., log=print, device=torch.device('cpu'), methods=METHODS) -> dict:
    "Every method on a state of `mb` MB on `device`, `reps` repetitions after one warm-up; the raw timings"
    from fastai.torch_core import to_device
    state = to_device(make_state(mb*10**6), device)
    folder = root/f'{mb}MB'; shutil.rmtree(folder, ignore_errors=True); folder.mkdir(parents=True)
    b = Bench(state, folder, device)
    runs, machine_load = {m: [] for m in methods}, []
    try:
        for rep in range(-1, reps):                 # rep -1: warm-up, not recorded
            order = rotated(list(methods), max(rep, 0))
            waited = wait_quiet(quiet) if rep >= 0 and quiet else 0.
            before = load()
            for m in order:
                os.sync(); time.sleep(settle)       # earlier writes and deletions settle before the next method
                c0 = time.process_time()
                blocking, total, extra = getattr(b, m)()
                cpu = time.process_time() - c0
                shutil.rmtree(folder, ignore_errors=True); folder.mkdir()
                trim()
                if rep >= 0: runs[m].append(dict(blocking=blocking, total=total, cpu=cpu, order=order.index(m), **extra))
            if rep >= 0:
                machine_load.append(dict(before=before, after=load(), waited_for_quiet_s=waited))
                log(f'  {mb} MB rep {rep+1}/{reps}: ' + ', '.join(f'{m} {runs[m][-1]["blocking"]:.3f}/{runs[m][-1]["total"]:.3f}' for m in methods))
    finally:
        b.close()
        shutil.rmtree(folder, ignore_errors=True)
    size = dict(mb=mb, bytes=nbytes(state), n_tensors=len(tensors(state)), runs=runs, machine_load=machine_load)
    del b, state; trim()
    return size

GOALS = {   # name: (what, op, goal, (method, key) over (method, key)); a throughput ratio is the inverse of the times'
    'async_blocking_over_memcpy': ('ddpsafe async blocking / memcpy into reused buffers', '<=', 1.2, ('ddpsafe_async', 'blocking'), ('memcpy', 'blocking')),
    'sync_throughput_over_raw': ('ddpsafe sync throughput / raw sequential write + fsync throughput', '>=', 0.9, ('raw_write', 'total'), ('ddpsafe_sync', 'total')),
    'async_blocking_over_dcp_async': ('ddpsafe async blocking / DCP async_save blocking (defaults)', '<=', 0.4, ('ddpsafe_async', 'blocking'), ('dcp_async', 'blocking')),
    'async_blocking_over_dcp_async_cached': ('ddpsafe async blocking / DCP async_save blocking (cached stager)', '<', 1.0,
                                             ('ddpsafe_async', 'blocking'), ('dcp_async_cached', 'blocking')),
    'async_total_over_sync': ('ddpsafe async total (until committed) / ddpsafe sync total', '<=', 1.3, ('ddpsafe_async', 'total'), ('ddpsafe_sync', 'total')),
}

def meets(v:float, op:str, goal:float) -> bool: return bool(v <= goal if op == '<=' else v >= goal if op == '>=' else v < goal)

def summarize(size:dict) -> dict:
    "Medians per method, and the goal ratios: paired within each repetition, of the medians, of the minimums"
    runs, gb = size['runs'], size['bytes']/1e9
    med = {m: dict(blocking=statistics.median(r['blocking'] for r in rs), total=statistics.median(r['total'] for r in rs),
                   min_total=min(r['total'] for r in rs), max_total=max(r['total'] for r in rs)) for m, rs in runs.items()}
    for m in med: med[m]['total_gbps'] = gb/med[m]['total']; med[m]['blocking_gbps'] = gb/med[m]['blocking']
    best = {m: dict(blocking=min(r['blocking'] for r in rs), total=min(r['total'] for r in rs)) for m, rs in runs.items()}
    ratios = {}
    if {'ddpsafe_async', 'memcpy'} <= runs.keys():
        cpu_ratio = [a.get('blocking_cpu', 0)/m['cpu'] for a, m in zip(runs['ddpsafe_async'], runs['memcpy']) if m['cpu']]
        ratios['async_blocking_over_memcpy_cpu_time'] = dict(
            what='the same, in CPU time of the process (less sensitive to other processes on the machine); not a goal',
            median_paired=statistics.median(cpu_ratio) if cpu_ratio else None, per_rep=cpu_ratio)
    if {'memory_tier', 'memcpy'} <= runs.keys():
        per_rep = [x['blocking']/y['blocking'] for x, y in zip(runs['memory_tier'], runs['memcpy'])]
        ratios['memory_tier_over_memcpy'] = dict(what='a memory-tier save (it blocks for all of it) / memcpy into reused buffers; not a goal',
                                                 median_paired=statistics.median(per_rep), per_rep=per_rep)
    for k, (what, op, goal, (m, mk), (d, dk)) in GOALS.items():
        if not {m, d} <= runs.keys(): continue
        per_rep = [x[mk]/y[dk] for x, y in zip(runs[m], runs[d])]
        v, b = statistics.median(per_rep), best[m][mk]/best[d][dk]
        ratios[k] = dict(what=what, goal=f'{op} {goal}', median_paired=v, of_medians=med[m][mk]/med[d][dk], of_minimums=b,
                         per_rep=per_rep, met=meets(v, op, goal), met_of_minimums=meets(b, op, goal))
    if 'ddpsafe_async' in runs:     # the slots and the writer's own pages, at their most, over the state
        slots, writer = (max(r[k] for r in runs['ddpsafe_async']) for k in ('slots_bytes', 'writer_anon_bytes'))
        ratios['async_host_memory_over_state'] = dict(what="async saves' host memory (their slot in /dev/shm + the writer process's own) / the state; not a goal",
                                                      median_paired=(slots + writer)/size['bytes'], slots_bytes=slots, writer_anon_bytes=writer)
    return dict(median=med, best=best, ratios=ratios)

def filesystem(path:Path) -> dict:
    "The mount that holds `path`: mount point, type, device"
    path, best = Path(path).resolve(), None
    for line in Path('/proc/mounts').read_text().splitlines():
        dev, mnt, typ, *_ = line.split()
        if (path == Path(mnt) or Path(mnt) in path.parents) and (best is None or len(mnt) > len(best[1])): best = (dev, mnt, typ)
    return dict(path=str(path), device=best[0], mount=best[1], type=best[2]) if best else dict(path=str(path))

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--sizes', default='100,500,2000', help='state sizes in MB, comma separated (default 100,500,2000)')
    p.add_argument('--reps', type=int, default=7, help='measured repetitions per size (default 7), after one warm-up')
    p.add_argument('--dir', default='/tmp/ddpsafe-bench', help='where the checkpoints are written (default /tmp/ddpsafe-bench)')
    p.add_argument('--out', default=str(HERE/'results'), help='folder for checkpoint.json')
    p.add_argument('--settle', type=float, default=0.2, help='seconds to pause (after os.sync) before each measurement')
    p.add_argument('--quiet', type=float, default=30., help='before each repetition, wait up to this many seconds for the CPU pressure to drop below 50%%')
    p.add_argument('--device', default='cpu', help="where the state is: 'cpu' (default) or 'cuda' (writes checkpoint_cuda.json)")
    p.add_argument('--methods', default=None, help=f"comma separated (default: all on the CPU, {','.join(DEVICE_METHODS)} on a device)")
    a = p.parse_args(argv)
    device = torch.device(a.device)
    if device.type == 'cuda' and not torch.cuda.is_available(): sys.exit('checkpoint_bench.py: --device cuda, and this machine has no CUDA device')
    methods = a.methods.split(',') if a.methods else METHODS if device.type == 'cpu' else DEVICE_METHODS
    if unknown := set(methods) - set(METHODS): sys.exit(f'checkpoint_bench.py: no method {sorted(unknown)}; the methods: {", ".join(METHODS)}')
    name = 'checkpoint' if device.type == 'cpu' else f'checkpoint_{device.type}'
    warnings.filterwarnings('ignore')
    torch.manual_seed(0)
    root, out = Path(a.dir), Path(a.out); root.mkdir(parents=True, exist_ok=True); out.mkdir(parents=True, exist_ok=True)
    results = dict(benchmark='checkpoint', date=now(utc=True),
                   machine=machine(), device=device_facts(device), filesystem=filesystem(root), reps=a.reps, warmup_reps=1, methods=methods,
                   goals={k: dict(what=w, goal=f'{op} {g}') for k, (w, op, g, *_) in GOALS.items()},
                   settle_s=a.settle, quiet_wait_s=a.quiet, load_at_start=load(),
                   command=command('checkpoint_bench.py', argv), sizes=[])
    print(f'writing to {results["filesystem"]}; torch {torch.__version__}, {torch.get_num_threads()} threads')
    t0 = time.time()
    for mb in [int(s) for s in a.sizes.split(',')]:
        size = measure_size(mb, a.reps, root, a.settle, a.quiet, device=device, methods=methods)
        size.update(summarize(size))
        results['sizes'].append(size)
        results['seconds'] = time.time() - t0
        (out/f'{name}.json').write_text(json.dumps(results, indent=1))    # after each size: a run cut short keeps what it measured
        for k, r in size['ratios'].items():
            if 'goal' not in r: continue
            print(f'{mb} MB: {k} = {r["median_paired"]:.3f} (of medians {r["of_medians"]:.3f}, of minimums {r["of_minimums"]:.3f}; '
                  f'goal {r["goal"]}: {"met" if r["met"] else "MISSED"}, best-of-N {"met" if r["met_of_minimums"] else "MISSED"})')
    print(f'wrote {out/name}.json in {results["seconds"]:.0f}s')
    return results

if __name__ == '__main__': main()
