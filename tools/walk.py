"""The walk of one checkpoint save through ddpsafe's modules, from the callback's decision to the committed folder.

Trains a small fastai learner in one process with `CheckpointCallback(every_steps=4)` and traces its save at step 4
(synchronous, local, unsharded; or the variant `--async` or `--upload` names). Prints ddpsafe's stack when the
checkpoint's folder is renamed into place (the path from the decision to the commit: its modules, and its returns to a
module already left), the calls the whole save makes from one of ddpsafe's modules into another, and the collectives among
them (each one a wait of every rank for the slowest: a synchronous save makes two, the gather of the ranks' RNG states
and rank 0's one commit).
    python tools/walk.py [--async] [--upload] [--json]
"""
import argparse, json, sys, tempfile, warnings
from pathlib import Path

def _mod(frame) -> str|None:
    "ddpsafe's module of `frame`, without the package's name; `None` for another package's"
    name = frame.f_globals.get('__name__') or '' if frame is not None else ''
    return name.removeprefix('ddpsafe.') if name.startswith('ddpsafe.') else None

def _stack(frame) -> list:
    "ddpsafe's frames from the outermost to `frame`, as 'module:function' (`write.saver:Saver.save`)"
    out = []
    while frame is not None:
        if (m := _mod(frame)) is not None: out.append(f'{m}:{frame.f_code.co_qualname}')
        frame = frame.f_back
    return out[::-1]

_HOOKS = ('__setattr__', '__getattr__')   # attribute hooks (`TrainingCallback.__setattr__`): not counted

def trace(f):
    "Run `f()`; its calls from one of ddpsafe's modules into another, and ddpsafe's stack when a checkpoint folder is committed"
    calls, commits = [], []
    def profile(frame, event, arg):
        if event == 'call' and frame.f_code.co_name in _HOOKS: return   # setting an attribute: not a step of the save
        if event == 'call' and (m := _mod(frame)) is not None and (c := _mod(frame.f_back)) is not None and c != m:
            calls.append((c, m, frame.f_code.co_qualname))     # made by ddpsafe's code (not torch calling a file of ours)
        elif event == 'c_call' and getattr(arg, '__name__', '') == 'replace' and _mod(frame) == 'storage.commit' \
                and str(frame.f_locals.get('final', '')).rsplit('/', 1)[-1].startswith('step-'):
            commits.append(_stack(frame))                      # the checkpoint's folder, renamed into place
    sys.setprofile(profile)
    try: f()
    finally: sys.setprofile(None)
    return dict(calls=calls, commit=commits[-1] if commits else None)

def _returns(mods:list) -> list:
    "The modules of `mods` entered again after control left them"
    return [m for i,m in enumerate(mods) if m in mods[:i] and mods[i-1] != m]

COLLECTIVES = ('on_main', 'on_main_alone', 'agree', 'all_ranks', 'barrier')   # dist.collectives': every rank takes part, all wait for the slowest

def summary(walk:dict) -> dict:
    "The path from the decision to the commit: its modules and returns; the save's calls between modules, and its collectives"
    path = walk['commit'] or []
    path = path[next((i for i,h in enumerate(path) if h.endswith('.save')), 0):]     # from the callback's `save`
    mods = [h.split(':')[0] for h in path]
    mods = [m for i,m in enumerate(mods) if not i or mods[i-1] != m]
    tree = sorted({m for c,m,_ in walk['calls']} | {c for c,m,_ in walk['calls']})
    return dict(path=path, path_modules=mods, n_path_modules=len(set(mods)), path_returns=_returns(mods),
                n_calls_between_modules=len(walk['calls']), modules_entered=tree, n_modules_entered=len(tree),
                collectives=[f'{c}->{f}' for c,m,f in walk['calls'] if m == 'dist.collectives' and f in COLLECTIVES])

def walk_of_save(async_save=False, upload=False) -> list:
    "Train a small learner and trace its save at step 4"
    from fastai.test_utils import synth_learner
    import fastai.callback.progress   # `Learner.no_bar`
    from ddpsafe.all import CheckpointCallback
    class Traced(CheckpointCallback):
        "Traces its save of step 4"
        def save(self, *args, **kwargs):
            if self.position()['global_step'] != 4 or hasattr(self, 'walk'): return super().save(*args, **kwargs)
            out = {}
            def go():
                out['saved'] = super(Traced, self).save(*args, **kwargs)
                if async_save: self.saver.settle()      # the background write's part of the walk: on its own thread, not traced
            self.walk = trace(go)
            return out['saved']
    tmp = Path(tempfile.mkdtemp())
    learn = synth_learner(n_trn=4, path=tmp)
    cb = Traced(every_steps=4, async_save=async_save, exit_code=None, **(dict(local='fast') if upload else {}))
    with warnings.catch_warnings(), learn.no_bar(), learn.no_logging():
        warnings.simplefilter('ignore'); learn.fit(1, cbs=cb)
    return cb.walk

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--async', dest='async_save', action='store_true', help='async_save=True (the background thread is not traced)')
    p.add_argument('--upload', action='store_true', help="local='fast': written to a local folder, then uploaded")
    p.add_argument('--json', action='store_true', help='print the summary as JSON')
    a = p.parse_args()
    s = summary(walk_of_save(a.async_save, a.upload))
    if a.json: print(json.dumps(s, indent=1)); sys.exit()
    print(f"from the decision to the committed folder: {len(s['path'])} frames in {s['n_path_modules']} modules "
          f"({' -> '.join(s['path_modules'])}), returns to a module already left: {s['path_returns'] or 'none'}")
    for h in s['path']: print('   ', h)
    if not s['path'] and a.async_save: print("    (none traced: with --async the commit runs on the writer's thread, which this tool does not trace)")
    print(f"the whole save: {s['n_calls_between_modules']} calls from one module of ddpsafe's into another, "
          f"{s['n_modules_entered']} modules ({' '.join(s['modules_entered'])}); "
          f"{len(s['collectives'])} collectives ({' '.join(s['collectives']) or 'none'})")
