"""How ddpsafe is built, measured from its source with `ast` (nothing of ddpsafe is imported):

(a) the floors of its internal import graph: a module that imports none of ddpsafe's own modules is on floor 1, any other
    one floor above the highest module it imports (the longest chain of imports that ends at it); imports inside
    functions count too (`demo` imports `all` there), and so do `demo` and `all` themselves. An import that is not of a
    module strictly below the importer is an import cycle: a module that imports one above it.
(b) the lines of `CheckpointCallback`'s own code: its class and the `@patch`ed methods of it in `ddpsafe/callback/checkpoint.py`.
(c) its constructor's parameters, and the distinct attributes its code sets (`self.X = ...`; also with `store_attr()`'s).
(d) the names its modules export: each module's `__all__` (what `from ddpsafe.X import *` and `ddpsafe.all` give), summed;
    `all` itself, which gathers the others, is not counted. Helpers that modules share are imported by name instead.

    python tools/structure.py [PACKAGE_DIR]      # default: the `ddpsafe` folder next to this one's parent
"""
from __future__ import annotations
import ast, sys
from pathlib import Path

PKG = 'ddpsafe'
SKIP = {'_modidx', '__init__'}   # nbdev's index of names; each package's `__init__` (the version; a room's one-line comment)

def modules(pkg:Path) -> dict:
    "Each module's dotted name inside the package (`dist.ranks`, `all`) and its parsed source"
    return {'.'.join(p.relative_to(pkg).with_suffix('').parts): ast.parse(p.read_text(), str(p))
            for p in sorted(pkg.rglob('*.py')) if p.stem not in SKIP}

def room(m:str) -> str:
    "The subpackage a module is in (`dist` for `dist.ranks`), or '' for the top level"
    return m.rpartition('.')[0]

def _target(me:str, name:str|None, level:int, alias:str|None=None) -> str|None:
    "The dotted name, inside the package, that an import in module `me` names (a module, or a name in one), or `None` for another package's"
    parts = name.split('.') if name else []
    if level == 0:
        if not parts or parts[0] != PKG: return None
        parts = parts[1:]
    else:
        base = me.split('.')[:-1]   # the package `me` is in
        if level - 1 > len(base): return None
        parts = base[:len(base) - (level - 1)] + parts
    return '.'.join(parts + ([alias] if alias else [])) or '__init__'

def resolve(dotted:str, mods) -> str|None:
    "The module of `mods` that `dotted` names, or a name in (its longest prefix that is a module)"
    parts = dotted.split('.')
    return next(('.'.join(parts[:i]) for i in range(len(parts), 0, -1) if '.'.join(parts[:i]) in mods), None)

def imports(tree, me:str='', mods=()) -> dict:
    "The ddpsafe modules (of `mods`) that module `me`, parsed as `tree`, imports: {module: 'top' or 'lazy'} (lazy: only inside a function)"
    out = {}
    def visit(node, lazy):
        for ch in ast.iter_child_nodes(node):
            inner = lazy or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            found = []
            if isinstance(ch, ast.Import): found = [_target(me, a.name, 0) for a in ch.names]
            elif isinstance(ch, ast.ImportFrom): found = [_target(me, ch.module, ch.level, a.name) for a in ch.names]
            for t in found:
                m = resolve(t, mods) if t is not None else None
                if m is not None and out.get(m) != 'top': out[m] = 'lazy' if lazy else 'top'
            visit(ch, inner)
    visit(tree, False)
    return out

def graph(mods:dict) -> dict:
    "Who imports whom among `mods`: {module: {imported: 'top' or 'lazy'}}"
    return {m: {d: k for d, k in imports(t, m, mods).items() if d != m} for m, t in mods.items()}

def _sccs(g:dict) -> list:
    "The strongly connected components of `g` (Tarjan), each a sorted list"
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in g[v]:
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in g:
        if v not in index: visit(v)
    return out

def floors(g:dict) -> tuple:
    "(each module's floor, the import cycles): modules in a cycle share the floor of their cycle"
    comps = _sccs(g)
    comp_of = {m: i for i, c in enumerate(comps) for m in c}
    memo = {}
    def floor(i):
        if i not in memo:
            below = {comp_of[d] for m in comps[i] for d in g[m]} - {i}
            memo[i] = 1 + max((floor(j) for j in below), default=0)
        return memo[i]
    return {m: floor(comp_of[m]) for m in g}, [c for c in comps if len(c) > 1]

def upward(g:dict, fl:dict) -> list:
    "Every import of a module not strictly below the importer: (importer, imported, 'top' or 'lazy')"
    return [(m, d, k) for m in g for d, k in g[m].items() if fl[d] >= fl[m]]

def longest_chain(g:dict, fl:dict) -> list:
    "One longest chain of imports, top down"
    m = max(fl, key=lambda x: (fl[x], x))
    chain = [m]
    while fl[m] > 1:
        m = max((d for d in g[m] if fl[d] == fl[m]-1), default=None)
        if m is None: break
        chain.append(m)
    return chain

# (b) and (c): the callback
def _is_patch_of(f, cls:str) -> bool:
    "Is function `f` a `@patch` of class `cls` (its first parameter annotated `cls`)?"
    if not any((isinstance(d, ast.Name) and d.id == 'patch') or (isinstance(d, ast.Call) and getattr(d.func, 'id', None) == 'patch')
               for d in f.decorator_list): return False
    a = f.args.posonlyargs + f.args.args
    ann = a[0].annotation if a else None
    return isinstance(ann, ast.Name) and ann.id == cls or isinstance(ann, ast.Constant) and ann.value == cls

def _span(node) -> int:
    "Lines of `node`, its decorators included"
    first = min([node.lineno] + [d.lineno for d in getattr(node, 'decorator_list', [])])
    return node.end_lineno - first + 1

def _self_attrs(node) -> set:
    "Names X that `node` sets as `self.X = ...` (also in tuples and augmented assignments)"
    out = set()
    for n in ast.walk(node):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for e in ast.walk(t):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == 'self' and isinstance(e.ctx, ast.Store):
                    out.add(e.attr)
    return out

def callback(tree, cls:str='CheckpointCallback') -> dict:
    "The class's own code in `tree`: lines, constructor parameters, attributes set"
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    patches = [n for n in tree.body if isinstance(n, ast.FunctionDef) and _is_patch_of(n, cls)]
    init = next((n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == '__init__'), None)
    params = [a.arg for a in (init.args.posonlyargs + init.args.args)[1:] + init.args.kwonlyargs] if init else []
    in_init = _self_attrs(init) if init else set()
    if init and any(isinstance(n, ast.Call) and getattr(n.func, 'id', None) == 'store_attr' for n in ast.walk(init)): in_init |= set(params)
    later = set().union(*[_self_attrs(n) for n in klass.body if n is not init], *[_self_attrs(p) for p in patches])
    assigned = set().union(*[_self_attrs(n) for n in klass.body], *[_self_attrs(p) for p in patches])
    return dict(class_lines=_span(klass), assigned=assigned, patches=len(patches), patch_lines=sum(map(_span, patches)),
                lines=_span(klass) + sum(map(_span, patches)), params=params, init_attrs=in_init, run_attrs=later - in_init,
                attrs=in_init | later)

def exported(mods:dict) -> dict:
    "Each module's `__all__`, as its source lists it (nbdev writes it literally), but `all`'s"
    out = {}
    for m, tree in mods.items():
        if m == 'all': continue
        for n in tree.body:
            if isinstance(n, ast.Assign) and any(getattr(t, 'id', '') == '__all__' for t in n.targets): out[m] = [e.value for e in n.value.elts]
    return out

def report(pkg:Path) -> dict:
    mods = modules(pkg)
    g = graph(mods)
    fl, cycles = floors(g)
    up = upward(g, fl)
    cb = callback(mods['callback.checkpoint'])
    print(f'(a) import floors of {pkg} ({len(mods)} modules; imports inside functions count, marked lazy)')
    for f in range(max(fl.values()), 0, -1):
        print(f'    floor {f:2}: ' + ', '.join(f'{m}' for m in sorted(m for m in fl if fl[m] == f)))
    chain = longest_chain(g, fl)
    print(f'    floors: {max(fl.values())}; longest chain of imports: {len(chain)} modules: {" -> ".join(chain)}')
    print(f'    import cycles: {cycles or "none"}; imports of a module not below the importer: '
          + (', '.join(f'{a} -> {b} ({k})' for a, b, k in up) or 'none'))
    print(f"(b) CheckpointCallback's own code in callback/checkpoint.py: {cb['lines']} lines "
          f"(class {cb['class_lines']} + {cb['patches']} @patch methods {cb['patch_lines']})")
    print(f"(c) constructor parameters: {len(cb['params'])}; distinct attributes set by `self.X =`: {len(cb['assigned'])}; "
          f"with store_attr's: {len(cb['attrs'])} ({len(cb['init_attrs'])} in __init__, {len(cb['run_attrs'])} more at run time: "
          f"{', '.join(sorted(cb['run_attrs']))})")
    names = exported(mods)
    print(f"(d) exported names: {sum(map(len, names.values()))} in {len(names)} modules (" + ', '.join(f'{m} {len(v)}' for m, v in
          sorted(names.items(), key=lambda kv: -len(kv[1]))) + ')')
    return dict(floors=fl, chain=chain, cycles=cycles, upward=up, callback=cb, exported=names)

if __name__ == '__main__':
    report(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent/PKG)
