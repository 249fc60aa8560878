"""A sharded model's checkpoint in shards against gathered whole to rank 0, on 2 CPU ranks: an FSDP2 MLP with fastai's
`Adam`; `whole` (`model_weights`, `full_optimizer_state`, `write_checkpoint` on rank 0) against `shards` (`shard_state`,
`write_in_shards`), and what an async save blocks for each way; the slowest rank's time and each rank's peak memory
(`VmHWM`) over the state, order alternated, ratios per repetition. Method: the benchmarks page, "A sharded model".

    python bench/shard_bench.py --sizes 100,300 --reps 5    # -> results/shards.json"""
from __future__ import annotations
import os, sys, json, time, shutil, argparse, platform, datetime, tempfile, statistics
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, status, reset_peak, trim

def rank_main(mb:int, reps:int, folder:str) -> dict:
    "One rank's measurements (run by `run_ranks`)"
    import types, torch
    from torch.distributed.fsdp import fully_shard
    from fastai.optimizer import Adam
    from ddpsafe.dist.collectives import rank, on_main, barrier; from ddpsafe.state.parts import model_weights, rng_state
    from ddpsafe.state.shards import shard_state; from ddpsafe.write.saver import write_in_shards; from ddpsafe.state.sharded import full_optimizer_state
    from ddpsafe.files.safe import checkpoint_writers; from ddpsafe.storage.manifest import write_checkpoint; from ddpsafe.write.snapshot import StateBuffers
    torch.manual_seed(0); torch.set_num_threads(1)
    width, layers = 1024, max(1, round(mb * 10**6 / 3 / 4 / 1024**2))      # weights + 2 Adam tensors, fp32
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    for m in [*model, model]: fully_shard(m)
    opt = Adam(list(model.parameters()), lr=1e-3)
    model(torch.randn(8, width)).sum().backward(); opt.step()
    learn = types.SimpleNamespace(model=model, opt=opt)
    state_bytes = 3 * sum(p.numel() for p in model.parameters()) * 4
    whole_bufs, shard_bufs, out = StateBuffers(), StateBuffers(), []

    def whole():
        files = checkpoint_writers({'model.safetensors': model_weights(model), 'optimizer.pt': full_optimizer_state(opt.state_dict()),
                                    'state.pt': {}, 'rng.pt': [rng_state()]})
        on_main(write_checkpoint, Path(folder)/'whole', 1, files)
    def shards():
        s, skeleton = shard_state(learn)
        write_in_shards(Path(folder)/'shards', 1, checkpoint_writers({'optimizer.pt': skeleton, 'state.pt': {}, 'rng.pt': [rng_state()]}), {}, s)
    def whole_copy(): whole_bufs.copy(dict(model=model_weights(model), opt=full_optimizer_state(opt.state_dict())))
    def shard_copy(): shard_bufs.copy(shard_state(learn)[0])
    ways = dict(whole=whole, shards=shards, whole_copy=whole_copy, shard_copy=shard_copy)
    for f in ways.values(): f()                                    # warm-up: buffers allocated, files written once
    for i in range(reps):
        rep = {}
        for name in (list(ways) if i % 2 == 0 else list(reversed(ways))):
            trim(); barrier(); os.sync(); time.sleep(0.2); barrier()
            base = status('VmRSS'); reset_peak()
            t0 = time.perf_counter(); ways[name](); t = time.perf_counter() - t0
            rep[name] = dict(seconds=t, extra_over_state=(status('VmHWM') - base) / state_bytes)
        out.append(rep)
    return dict(rank=rank(), state_bytes=state_bytes, layers=layers, reps=out)

def summarize(ranks:list) -> dict:
    "Per repetition: the slowest rank's time, each rank's memory; ratios within the repetition"
    reps = []
    for i in range(len(ranks[0]['reps'])):
        per = {name: dict(seconds=max(r['reps'][i][name]['seconds'] for r in ranks),
                          extra_over_state=[round(r['reps'][i][name]['extra_over_state'], 3) for r in ranks])
               for name in ranks[0]['reps'][i]}
        per['shards_over_whole_time'] = per['shards']['seconds'] / per['whole']['seconds']
        per['shard_copy_over_whole_copy_time'] = per['shard_copy']['seconds'] / per['whole_copy']['seconds']
        reps.append(per)
    med = lambda f: round(statistics.median(f(r) for r in reps), 3)
    return dict(reps=reps, median={**{f'{k}_seconds': med(lambda r: r[k]['seconds']) for k in ('whole', 'shards', 'whole_copy', 'shard_copy')},
                                   **{f'rank0_extra_{k}': med(lambda r: r[k]['extra_over_state'][0]) for k in ('whole', 'shards', 'whole_copy', 'shard_copy')},
                                   **{k: med(lambda r: r[k]) for k in ('shards_over_whole_time', 'shard_copy_over_whole_copy_time')}})

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--sizes', default='100,300', help='states to measure: weights and Adam state, in MB')
    p.add_argument('--reps', type=int, default=5)
    p.add_argument('--ranks', type=int, default=2)
    p.add_argument('--out', default=str(HERE/'results'/'shards.json'))
    a = p.parse_args(argv)
    from ddpsafe.testing import run_ranks
    sizes = []
    for mb in map(int, a.sizes.split(',')):
        folder = tempfile.mkdtemp(prefix='ddpsafe-shard-bench-')
        try: ranks = run_ranks(rank_main, n=a.ranks, args=(mb, a.reps, folder), timeout=3600)
        finally: shutil.rmtree(folder, ignore_errors=True)
        sizes.append(dict(mb=mb, state_bytes=ranks[0]['state_bytes'], layers=ranks[0]['layers'], **summarize(ranks)))
        print(mb, 'MB:', json.dumps(sizes[-1]['median'], indent=1))
    res = dict(benchmark='shards', date=datetime.datetime.now().isoformat(timespec='seconds'),
               command='python bench/shard_bench.py ' + ' '.join(argv if argv is not None else sys.argv[1:]),
               machine=dict(cpus=os.cpu_count(), python=platform.python_version(), load=os.getloadavg()), ranks=a.ranks, sizes=sizes)
    Path(a.out).write_text(json.dumps(res, indent=1))

if __name__ == '__main__': main()
