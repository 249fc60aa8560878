"ddpsafe's modules stand in floors: no import cycle, no module importing one above it (measured by `tools/structure.py`)"
import os, ast, importlib.util, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location('structure', ROOT/'tools'/'structure.py')
structure = importlib.util.module_from_spec(spec); spec.loader.exec_module(structure)

def floors_of(pkg:Path):
    g = structure.graph(structure.modules(pkg))
    fl, cycles = structure.floors(g)
    return g, fl, cycles, structure.upward(g, fl)

def test_no_import_cycle():
    g, fl, cycles, up = floors_of(ROOT/'ddpsafe')
    assert 'core' in g and 'checkpoint' in g and fl['demo'] == max(fl.values())
    assert cycles == [], f'import cycles between ddpsafe modules: {cycles}'
    assert up == [], f'modules importing one not below them: {up}'
    for m in ('state.training_state', 'state.parts'):
        assert not {'patches.learner', 'callback.preempt'} & set(g[m]), f"{m} imports {set(g[m])}: errors live where they are raised (ranks)"
    chain = structure.longest_chain(g, fl)
    # 8, as issue 58 asked: demo -> callback.checkpoint -> write.saver -> state.parts -> state.training_state ->
    # dist.collectives -> dist.watch -> dist.ranks (`core` is three floors: the heartbeat needs the ranks, the collectives the
    # heartbeat). It was 9 while the safe files and the writers were one module, above the collectives, that the state imported
    assert len(chain) <= 8, f"a chain of {len(chain)} imports between ddpsafe's modules (at most 8): {' -> '.join(chain)}"

ROOMS = ('storage', 'dist', 'formats', 'files', 'state', 'patches', 'write', 'callback')   # bottom up: each imports only rooms before it
FRONT = {'all', 'core', 'io', 'checkpoint', 'testing', 'cli', 'goodput', 'demo'}   # the top level: what users import and run
ROOM_CAP = 8

def room_graph(g:dict) -> dict:
    "Which rooms (subpackages; '' for the top level) import which: {room: {room imported: [the imports]}}"
    out = {}
    for m, ds in g.items():
        for d in ds:
            a, b = structure.room(m), structure.room(d)
            if a != b: out.setdefault(a, {}).setdefault(b, []).append(f'{m} -> {d}')
    return out

def room_problems(g:dict) -> list:
    "What is wrong with the rooms of the import graph `g`: a room of over 8 modules, an import of a room not below, a stray top-level module"
    rooms = {}
    for m in g: rooms.setdefault(structure.room(m), []).append(m)
    out = [f'{r}/ holds {len(ms)} modules (at most {ROOM_CAP})' for r, ms in rooms.items() if r and len(ms) > ROOM_CAP]
    out += [f'{r}/ is not one of the rooms {ROOMS}' for r in rooms if r and r not in ROOMS]
    out += [f'{m}: a module at the top level, which holds only {sorted(FRONT)}' for m in rooms.get('', []) if m not in FRONT]
    order = {r: i for i, r in enumerate(ROOMS)}
    for a, bs in room_graph(g).items():
        for b, how in bs.items():
            if a and b and order.get(b, -1) >= order.get(a, -1): out.append(f'{a}/ imports {b}/, not below it: {how}')
            if a and not b: out.append(f'{a}/ imports the top level: {how}')
    return out

def test_rooms():
    "Subpackages by concern, each of at most 8 modules, each importing only the rooms below it: no circle between them"
    g, *_ = floors_of(ROOT/'ddpsafe')
    assert room_problems(g) == []

def test_the_check_sees_a_room_out_of_order():
    g = {'storage.a': {'dist.b': 'top'}, 'dist.b': {}, 'extra': {}, 'write.c': {'all': 'lazy'}, 'all': {}}
    assert room_problems(g) == ["extra: a module at the top level, which holds only ['all', 'checkpoint', 'cli', 'core', 'demo', 'goodput', 'io', 'testing']",
                                'storage/ imports dist/, not below it: [\'storage.a -> dist.b\']', "write/ imports the top level: ['write.c -> all']"]

def top_imports(tree) -> set:
    "The packages a module imports at its top level (not inside a function): what importing it costs"
    out = set()
    for n in tree.body:
        if isinstance(n, ast.Import): out |= {a.name.split('.')[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and not n.level: out.add((n.module or '').split('.')[0])
    return out

def test_storage_imports_no_torch():
    "`storage/` (the commit protocol, the manifests, the folder's owner, the upload) imports neither torch nor fastai: the CLI and the writer process stand on it"
    mods = structure.modules(ROOT/'ddpsafe')
    found = {m: top_imports(t) & {'torch', 'fastai', 'numpy'} for m, t in mods.items() if structure.room(m) == 'storage'}
    assert len(found) >= 4 and not any(found.values()), found
    g = structure.graph(mods)
    assert not {d for m in found for d in g[m] if structure.room(d) != 'storage'}, {m: g[m] for m in found}

def test_formats_import_no_torch():
    "`formats/` (torch's zip and safetensors' header, laid out) imports nothing but the standard library's, and no module of ddpsafe: the writer process writes with it"
    mods = structure.modules(ROOT/'ddpsafe')
    found = {m: top_imports(t) for m, t in mods.items() if structure.room(m) == 'formats'}
    assert {'formats.archive', 'formats.safetensors'} <= set(found), found
    assert all(imps <= {'sys', 'struct', 'json', '__future__'} for imps in found.values()), found
    assert not any(structure.graph(mods)[m] for m in found), {m: structure.graph(mods)[m] for m in found}

def test_the_check_sees_a_cycle(tmp_path):
    (tmp_path/'a.py').write_text('from .b import x\n')
    (tmp_path/'b.py').write_text('import os\ndef f():\n    from ddpsafe.a import y\n')   # lazy, inside a function: still a cycle
    (tmp_path/'c.py').write_text('from . import a\n')
    g, fl, cycles, up = floors_of(tmp_path)
    assert cycles == [['a', 'b']] and fl['c'] == fl['a'] + 1
    assert {(a, b) for a, b, _ in up} == {('a', 'b'), ('b', 'a')}

wspec = importlib.util.spec_from_file_location('walk', ROOT/'tools'/'walk.py')
walk = importlib.util.module_from_spec(wspec); wspec.loader.exec_module(walk)

def test_walk_of_a_save():
    "`tools/walk.py` traces a real save from the callback's decision to the rename that commits it"
    s = walk.summary(walk.walk_of_save())
    assert s['path'][0] == 'callback.checkpoint:CheckpointCallback.save' and s['path'][-1].startswith('storage.commit:'), s['path']
    assert s['path_modules'][:2] == ['callback.checkpoint', 'write.saver'] and 'storage.manifest' in s['path_modules'], s['path_modules']
    assert 'storage.upload' not in s['modules_entered'], f"a local save without a second tier enters upload: {s['modules_entered']}"
    # the whole save, not the stack at the rename: a path with "no return" was once bought with two more broadcasts a save
    assert s['collectives'] == ['state.training_state->all_ranks', 'write.saver->on_main'], f"a synchronous save makes these collectives: {s['collectives']}"
    # 16 before issue 71's rooms: the 12 of 0.3.0, `ranks` and `training_state` split from `core` and `parts`, `fit_loops`
    # from `checkpoint`, and `slot_copy` and `snapshot` for helpers; 14 now: the files' fingerprints (`tensor_marks`,
    # `skeleton`) and the walk over a state's tensors (`map_tensors`) are `formats.files`'; 15 since: the safetensors layout is
    # `formats.safetensors`', apart from torch (the slots use it too), so a save of a `.safetensors` file enters it as well
    slots = [m for m in s['modules_entered'] if m in ('write.slots', 'write.slot_copy', 'write.memory', 'write.snapshot')]
    assert slots == [], f'a synchronous save enters the modules of the slots and the background writes: {slots}'
    assert s['n_modules_entered'] <= 15, f"a synchronous save enters {s['n_modules_entered']} modules: {s['modules_entered']}"
    assert walk._returns(['a', 'b', 'a', 'c', 'c', 'b']) == ['a', 'b']

def _part_makers(imports:str) -> list:
    "The part makers registered in a fresh interpreter after `imports`"
    code = f'{imports}\nfrom ddpsafe.state.parts import PART_MAKERS\nprint(*[f.__qualname__ for f in PART_MAKERS])'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()

def test_same_parts_whatever_is_imported():
    "A checkpoint holds the same parts whether a script imports the callback alone or `ddpsafe.all`"
    alone, everything = _part_makers('from ddpsafe.callback.checkpoint import CheckpointCallback'), _part_makers('import ddpsafe.all')
    assert alone == everything, f'the callback alone registers {alone}; with ddpsafe.all: {everything}'
    assert 'hidden_part' in alone, alone   # fastai's text models carry a hidden state that a resume must put back

def _all_of(path:Path) -> list:
    "The names a module's literal `__all__` lists"
    for n in ast.parse(path.read_text()).body:
        if isinstance(n, ast.Assign) and any(getattr(t, 'id', '') == '__all__' for t in n.targets) and isinstance(n.value, ast.List):
            return [e.value for e in n.value.elts]
    return []

def idle_star_imports(pkg:Path) -> list:
    "(module, imported) for each `from .imported import *` in `pkg` of which the module uses no name"
    out = []
    for m, t in structure.modules(pkg).items():
        if m in ('all', 'core', 'io', 'checkpoint'): continue   # `all` gathers every name, for users; the three paths of the API give theirs
        used = {n.id for n in ast.walk(t) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(t) if isinstance(n, ast.Attribute)}
        for n in t.body:
            if isinstance(n, ast.ImportFrom) and any(a.name == '*' for a in n.names) and (d := structure._target(m, n.module, n.level)):
                if not set(_all_of(pkg.joinpath(*d.split('.')).with_suffix('.py'))) & used: out.append((m, d))
    return out

def test_no_idle_star_import():
    "Every star import supplies a name its module uses (a module's `__all__` says what users import from it)"
    assert idle_star_imports(ROOT/'ddpsafe') == []

def test_the_check_sees_an_idle_star_import(tmp_path):
    (tmp_path/'a.py').write_text("__all__ = ['x', 'y']\nx = y = 1\n")
    (tmp_path/'b.py').write_text('from .a import *\ndef f(): return 2\n')
    (tmp_path/'c.py').write_text('from .a import *\ndef f(): return y\n')
    assert idle_star_imports(tmp_path) == [('b', 'a')]

def private_imports(pkg:Path) -> list:
    "(module, line, import) for each `_name` (dunders aside) a module of `pkg` imports from ddpsafe's own, relative or absolute, at any depth"
    out = []
    for m, t in structure.modules(pkg).items():
        for n in ast.walk(t):
            if not isinstance(n, ast.ImportFrom) or not (n.level or (n.module or '').split('.')[0] == 'ddpsafe'): continue
            out += [(m, n.lineno, f"from {'.'*n.level}{n.module or ''} import {a.name}") for a in n.names
                    if a.name.startswith('_') and not (a.name.startswith('__') and a.name.endswith('__'))]
    return out

def test_no_private_imports():
    "No module imports another's `_name`: what two modules share is public in the one that owns it (an `#| exporti` cell keeps it out of `__all__`)"
    found = private_imports(ROOT/'ddpsafe')
    assert found == [], f"{len(found)} imports of another module's private names: " + '; '.join(f'{m}.py:{l} {i}' for m, l, i in found)

def test_the_check_sees_a_private_import(tmp_path):
    (tmp_path/'a.py').write_text('_x = __y__ = z = 1\n')
    (tmp_path/'b.py').write_text('from .a import _x, __y__, z\n')   # a dunder is the package's own, as `__version__`
    (tmp_path/'c.py').write_text('def f():\n    from ddpsafe.a import _x\n')   # absolute, inside a function: still one
    (tmp_path/'d.py').write_text('from os.path import _get_sep\n')             # another package's
    assert private_imports(tmp_path) == [('b', 1, 'from .a import _x'), ('c', 2, 'from ddpsafe.a import _x')]

EXPORTED_CAP = 200

def test_exported_names():
    """At most 200 names in the modules' `__all__`: what users call and what the pages document, not the helpers modules share.
    A name is counted once: a module that gives its floor's names too (`from ddpsafe.dist.collectives import *` gives `rank`, defined
    in `ddpsafe.dist.ranks`, as it did before the split) adds no name"""
    names = structure.exported(structure.modules(ROOT/'ddpsafe'))
    n = len(set().union(*names.values()))
    assert 'CheckpointCallback' in names['callback.checkpoint'] and 'rank' in names['dist.ranks'] and 'agree' in names['dist.collectives'], names
    assert n <= EXPORTED_CAP, f'{n} exported names (at most {EXPORTED_CAP}): ' + ', '.join(f'{m} {len(v)}' for m, v in names.items())

ALL_CAP = 70
# What shared/API.md's tables (and its command line list) call by a Python name; `register_part` and `Part` from issue 71.
# Its other rows are methods patched onto fastai (`learn.save`, `learn.fsdp_ctx()`) or fastai's own (`SaveModelCallback`)
API_MD_NAMES = ('rank', 'world', 'is_main', 'barrier', 'DistTimeout', 'on_main', 'agree', 'any_rank',
                'atomic_save', 'safe_load', 'prepare_dir', 'load_learner', 'load_dls', 'CheckpointCallback',
                'register_part', 'Part', 'ddpsafe_ls', 'ddpsafe_verify', 'ddpsafe_status', 'ddpsafe_export')

def api_index_names() -> set:
    "The names the API index lists (tools/docsite/api_index.py `API_GROUPS`) as Python names: `ddpsafe-ls` as its function `ddpsafe_ls`"
    sys.path.insert(0, str(ROOT/'tools'))
    from docsite.api_index import API_GROUPS
    return {n for uses in API_GROUPS.values() for u in uses for n in (u.sym or u.name).split(', ')}

def all_problems(given:list, listed:set) -> list:
    "What is wrong with `given`, the names `from ddpsafe.all import *` gives, against the API index's names `listed`"
    return ([f'{len(given)} names (at most {ALL_CAP})'] * (len(given) > ALL_CAP) +
            [f'{n}: not in the API index (tools/docsite/api_index.py API_GROUPS); import it from its module' for n in given if n not in listed] +
            [f'{n}: shared/API.md calls it, ddpsafe.all does not give it' for n in API_MD_NAMES if n not in given])

def test_all_gives_the_api():
    """`from ddpsafe.all import *` gives what the docs present as the API: at most 70 names, each listed in the API index,
    every name shared/API.md calls among them. Everything else is imported from its module"""
    code = 'ns = {}\nexec("from ddpsafe.all import *", ns)\nprint(*sorted(set(ns) - {"__builtins__"}))'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert all_problems(out.stdout.split(), api_index_names()) == []

def test_the_check_sees_a_wide_all():
    listed = set(API_MD_NAMES) | {'run_ranks'}
    assert all_problems(sorted(listed), listed) == []
    assert all_problems([*API_MD_NAMES, *[f'helper{i}' for i in range(60)]], listed)[:2] == [
        '80 names (at most 70)', 'helper0: not in the API index (tools/docsite/api_index.py API_GROUPS); import it from its module']
    assert all_problems(['rank'], listed)[0] == 'world: shared/API.md calls it, ddpsafe.all does not give it'

MODULE_CAP, GROUND_CAP = 400, 350
GROUND = ('dist.ranks', 'dist.watch', 'dist.collectives')   # the ground floor: who the ranks are, how a rank is watched, how the ranks agree

def test_module_sizes():
    "No module of ddpsafe over 400 lines; none of the ground floor (`dist.ranks`, `dist.watch`, `dist.collectives`: what 0.3.0's `core` held) over 350"
    sizes = {'.'.join(p.relative_to(ROOT/'ddpsafe').with_suffix('').parts): len(p.read_text().splitlines())
             for p in (ROOT/'ddpsafe').rglob('*.py') if p.name != '_modidx.py'}
    over = {m: n for m, n in sizes.items() if n > MODULE_CAP}
    assert over == {}, f'modules over {MODULE_CAP} lines: {over}'
    g, fl, _, _ = floors_of(ROOT/'ddpsafe')
    assert [fl[m] for m in GROUND] == sorted(fl[m] for m in GROUND) and not g['dist.ranks'], {m: g[m] for m in GROUND}
    over = {m: sizes[m] for m in GROUND if sizes[m] > GROUND_CAP}
    assert over == {}, f'modules of the ground floor over {GROUND_CAP} lines: {over}'

BENCH_CAP = 1800

def test_bench_size():
    "bench/ (the benchmarks, their harness, the launched rank script, the GPU runner) at most 1,800 lines: one harness, no two scripts measuring one thing"
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT/'bench').iterdir() if p.is_file()}
    assert sum(sizes.values()) <= BENCH_CAP, f'bench/ is {sum(sizes.values())} lines, over {BENCH_CAP}: {sorted(sizes.items(), key=lambda kv: -kv[1])}'

WRITER_PROBE = r"""
import os, sys, tempfile
from ddpsafe.all import *
from ddpsafe.testing import synth_learner
from ddpsafe.callback.checkpoint import CheckpointCallback
os.environ['PYTHONPROFILEIMPORTTIME'] = '1'   # read at a process's start: the writer process, started below, lists its imports
folder = tempfile.mkdtemp()
learn = synth_learner(path=folder)
learn.fit(2, cbs=CheckpointCallback(every_steps=3, async_save=True, resume=False))
print('FIT DONE', flush=True)
"""

def imported_roots(stderr:str) -> set:
    "The top-level packages named by `-X importtime`'s lines (`import time: self | cumulative | name`)"
    rows = [l[len('import time:'):].split('|') for l in stderr.splitlines() if l.startswith('import time:')]
    return {r[2].strip().split('.')[0] for r in rows if len(r) == 3 and r[0].strip().isdigit()}

def test_writer_process_imports_no_torch(tmp_path):
    "A writer process started by a fit with async saves imports neither torch nor fastai: it writes bytes (issue 71)"
    p = subprocess.run([sys.executable, '-c', WRITER_PROBE], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                       env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert p.returncode == 0 and 'FIT DONE' in p.stdout, p.stdout[-2000:] + p.stderr[-3000:]
    roots = imported_roots(p.stderr)
    assert 'ddpsafe' in roots, f'no writer process listed its imports: {sorted(roots)}\n{p.stderr[-2000:]}'
    assert not roots & {'torch', 'fastai', 'numpy'}, f"the writer process imports {sorted(roots & {'torch', 'fastai', 'numpy'})}"

def test_imported_roots():
    lines = 'import time: self [us] | cumulative | imported package\nimport time:       120 |        120 |   torch.nn\nimport time: 5 | 5 | json\nother'
    assert imported_roots(lines) == {'torch', 'json'}
