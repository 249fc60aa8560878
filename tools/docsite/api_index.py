"""The API index (`api.md`) and each module page's "Use from this page" box, from one list: `API_GROUPS`.

Kept by hand because the site's reference is nbdev's `show_doc` entries on the notebooks' pages, which mkdocstrings
does not read, and no plugin groups a library's names by task. A name in `API_GROUPS` with no entry in the reference,
no one-line description, or a parameter with no docment fails the build (`DocsError`): a rename cannot leave a dead row.
"""
from __future__ import annotations
import importlib, inspect, re, sys
from typing import NamedTuple
from . import DocsError
from .hooks import nb_slugify
from .pages import CLI_PAGE, heading_ids
from .showdoc import table_cell

class Use(NamedTuple):
    """A public name in the API index: as a user writes it; `sym`: where its docstring is (default `name`), found in
    `<lib>/_modidx.py` in any module; `at`: `'page: heading'`, the section that documents a name without an entry of its
    own (the heading that is `heading`, else the first that contains it); `doc`: the one-liner when there is no docstring to take"""
    name: str
    sym: str|None = None
    at: str|None = None
    doc: str|None = None

# What a user calls, grouped by what they want to do: the API index's tables and each page's "Use from this page" box.
# The build fails (DocsError) when a name here has no entry in the reference, so a rename cannot leave a dead row.
API_GROUPS = {
    'Checkpoint and resume a fit': [
        Use('CheckpointCallback'), Use('CheckpointMismatch'), Use('CorruptCheckpoint'), Use('FolderInUse'),
        Use('newest_complete'), Use('checkpoint_status')],
    'Stop and requeue': [
        Use('REQUEUE_EXIT_CODE', at='storage.manifest: How a run ended',
            doc='75: what a run exits with once a preemption signal made it save and stop; a launcher requeues it'),
        Use('STOPPED_EXIT_CODE', at='storage.manifest: How a run ended',
            doc="3: what `ddpsafe-status` answers when the stop switch stopped the run; a launcher does not requeue it"),
        Use('StopRequests')],
    'fastai, made safe on import': [
        Use('Learner.save'), Use('Learner.load'), Use('Learner.export'), Use('load_learner'),
        Use('TextLearner.save_encoder', at='patches.learner: Text models',
            doc='Save the encoder to `file` in the model directory, once, on rank 0, atomically'),
        Use('TextLearner.load_encoder', at='patches.learner: Text models', doc='Load the encoder `file` on every rank'),
        Use('DataLoaders.save'), Use('load_dls'),
        Use('SaveModelCallback', at='callback.trackers: SaveModelCallback',
            doc="fastai's, with rank 0 deciding each new best and every rank loading the same best weights after fit"),
        Use('EarlyStoppingCallback, ReduceLROnPlateau', at='callback.trackers: Tracker decisions',
            doc="fastai's trackers, with rank 0's decisions (new best, stop, reduce) on every rank"),
        Use('Learner.distrib_ctx', at='patches.learner: fastai DDP on CPU',
            doc="fastai's `distrib_ctx`, on CPU too (gloo), with every wait bounded"),
        Use('Learner.snapshot')],
    'Safe files': [
        Use('atomic_save'), Use('safe_load'), Use('prepare_dir'), Use('atomic_write'),
        Use('CorruptFileError'), Use('UnsafePickleError')],
    'Decisions across ranks': [
        Use('rank'), Use('world'), Use('is_main'), Use('barrier'), Use('on_main'), Use('agree'), Use('any_rank'),
        Use('all_ranks'), Use('DistTimeout'), Use('PeerFailed'), Use('ddp_timeout')],
    'Your own state in checkpoints': [
        Use('Part'), Use('register_part'), Use('UserState'), Use('TrainingState')],
    'Sharded training': [
        Use('Learner.fsdp_ctx'), Use('full_weights'), Use('is_sharded')],
    'Test your training code on N ranks': [
        Use('run_ranks'), Use('RanksFailed'), Use('run_script'), Use('launch_ranks'), Use('synth_learner')],
    'Command line': [
        *[Use(f'ddpsafe-{c}', sym=f'ddpsafe_{c}', at=f'{CLI_PAGE}: `ddpsafe-{c}`') for c in ('ls', 'verify', 'status', 'export', 'demo')],
        Use('ddpsafe-goodput', sym='ddpsafe_goodput')],
}

class Ref(NamedTuple):
    "Where a public name's entry is (`page`, `anchor`) and its one-line description"
    name: str
    page: str
    anchor: str
    doc: str
    blank: tuple = ()   # the parameters its table leaves without details: those with no docment
    def link(self) -> str: return f"[{', '.join(f'`{n}`' for n in self.name.split(', '))}]({self.page}.md#{self.anchor})"

def _first_line(obj) -> str: return (inspect.getdoc(obj) or '').split('\n')[0]

def modidx_syms() -> dict:
    "Every documented name of the library by its qualified name (`Learner.save`): `[(module, page, anchor)]`"
    from nbdev.config import get_config
    lib = get_config().lib_path.name
    res = {}
    for mod, syms in importlib.import_module(f'{lib}._modidx').d['syms'].items():
        for k, (url, _) in syms.items():
            page, _, anchor = url.partition('#')
            res.setdefault(k[len(mod) + 1:], []).append((mod, re.sub(r'\.html$', '', page), anchor))
    for qual, locs in list(res.items()):   # a function given to `patch_fastai` is listed by its target too (`Learner.save`)
        if (target := patched_target(locs[0][0], qual)): res.setdefault(target, []).extend(locs)
    return res

def patched_target(mod:str, name:str) -> str|None:
    "The fastai target (`Learner.save`) the function `mod.name` replaces or adds through `patch_fastai`, if it is one"
    f = getattr(importlib.import_module(mod), name, None)
    patches = getattr(sys.modules.get('ddpsafe.patches.learner'), 'fastai_patches', {})
    return next((t for (_, t), g in patches.items() if f is not None and g is f), None)

def lookup(qual:str, syms:dict):
    "The object `qual` (`Learner.save`) names, from the first module `_modidx.py` lists it under; None if none"
    for mod, _, _ in syms.get(qual, []):
        obj = importlib.import_module(mod)
        try:
            for part in qual.split('.'): obj = getattr(obj, part)
            return obj
        except AttributeError: continue
    patches = getattr(sys.modules.get('ddpsafe.patches.learner'), 'fastai_patches', {})
    return next((f for (_, t), f in patches.items() if t == qual), None)

def entry_of(use:Use, qual:str, syms:dict, mds:dict) -> tuple[str, str]:
    "(page, anchor) of `use`'s entry in the reference; DocsError when there is none"
    if use.at:
        page, _, head = use.at.partition(': ')
        heads, head = heading_ids(mds.get(page, '')), head.replace('`', '')   # the heading that is `head` (`ddpsafe-ls`), else the first containing it
        hit = next((a for t, a in heads if t == head), None) or next((a for t, a in heads if head in t), None)
        if hit is None: raise DocsError(f'API index: {use.name}: page {page!r} has no heading with {head!r} (tools/docsite/api_index.py API_GROUPS)')
        return page, hit
    for _, page, anchor in syms.get(qual, []):
        ids = {a for _, a in heading_ids(mds.get(page, ''))}
        for a in (anchor, nb_slugify(qual), qual.split('.')[-1].lower()):   # nbdev's anchor, the heading's (`Learner.save`), the name's (`fsdp_ctx`)
            if a in ids: return page, a
    raise DocsError(f'API index: {use.name} has no entry in the reference ({qual}: not in _modidx.py, or its page has '
                    f'no such heading); rename it in tools/docsite/api_index.py API_GROUPS')

def resolve(use:Use, syms:dict, mds:dict) -> Ref:
    "Where `use`'s entry is and what it does in one line; DocsError when the reference has no such entry"
    qual = use.sym or use.name
    page, anchor = entry_of(use, qual, syms, mds)
    obj = lookup(qual, syms)
    doc = use.doc or (_first_line(obj) if obj is not None else '')
    if not doc: raise DocsError(f'API index: {use.name}: no docstring found for {qual} and no `doc` given (tools/docsite/api_index.py API_GROUPS)')
    return Ref(use.name, page, anchor, doc, () if use.at or not callable(obj) else undocumented(obj))

def undocumented(obj) -> tuple:
    "The parameters of `obj` with no docment: its entry's table would leave their details blank"
    from fastcore.docments import docments
    try: sig, docs = inspect.signature(obj), docments(obj, full=True, args_kwargs=True)
    except (TypeError, ValueError): return ()
    return tuple(n for n in sig.parameters if n != 'self' and not (docs.get(n) or {}).get('docment'))

def blank_details(refs:dict) -> list[str]:
    "Public entries whose parameter table leaves a parameter without details: `name (page): params`"
    return [f'{r.name} ({r.page}): {", ".join(r.blank)}' for rs in refs.values() for r in rs if r.blank]

def public_refs(mds:dict) -> dict[str, list[Ref]]:
    "`API_GROUPS` resolved: for each group, its names with their entries"
    syms = modidx_syms()
    return {g: [resolve(u, syms, mds) for u in uses] for g, uses in API_GROUPS.items()}

def _value_line(n:str, obj) -> str:
    "A constant as `n = value` when its repr is short and stable, else its type"
    r = repr(obj)
    return f'`{n} = {r}`' if isinstance(obj, (bool, int, float, str)) and len(r) <= 60 else f'a `{type(obj).__name__}`'

def home_module(n:str, lib:str) -> str:
    "The first module of `lib` (in `_modidx.py`'s order) that exports `n`"
    mods = importlib.import_module(f'{lib}._modidx').d['syms']
    return next((k for k in mods if n in getattr(importlib.import_module(k), '__all__', ())), lib)

def other_names(public:set) -> dict[str, list[tuple[str, str, str, str]]]:
    """Every other name the library's modules export (their `__all__`: `<lib>.all` gives the public ones only) and every
    fastai method the library patches, by module: (name, page, anchor, doc). A name is listed once, under its home"""
    from nbdev.config import get_config
    lib = get_config().lib_path.name
    syms, res, seen = modidx_syms(), {}, set()
    def add(mod, n, page, anchor, doc):
        if n not in public and n not in seen: seen.add(n); res.setdefault(mod, []).append((n, page, anchor, doc))
    for modname in importlib.import_module(f'{lib}._modidx').d['syms']:
        m = importlib.import_module(modname)
        for n in getattr(m, '__all__', ()):
            obj = getattr(m, n)
            mod, page, anchor = next(iter(syms.get(n, [])), (home_module(n, lib), '', ''))
            add(mod, n, page, anchor, _first_line(obj) if callable(obj) else _value_line(n, obj))
    for qual, locs in syms.items():   # methods patched onto fastai's classes: `Learner.fit`, `TrackerCallback.after_epoch`
        cls, _, meth = qual.rpartition('.')
        if not cls or '.' in cls or cls in syms or meth.startswith('_') and not meth.startswith('__'): continue
        mod, page, anchor = locs[0]
        add(mod, qual, page, anchor, _first_line(lookup(qual, syms)))
    order = list(importlib.import_module(f'{lib}._modidx').d['syms'])
    return dict(sorted(res.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))

def api_table(rows:list[tuple[str, str]]) -> str:
    "A table of names and one-liners, in a `div.api-table` (CSS: names unbroken; on a phone, each name above its line)"
    body = '\n'.join(f'| {n} | {table_cell(d)} |' for n, d in rows)
    return f'<div class="api-table" markdown="1">\n\n| Name | What it does |\n|---|---|\n{body}\n\n</div>'

def api_index(mds:dict, refs:dict, titles:dict) -> str:
    "The API index: the public names by task, one line each; below a break, every other name by module, collapsed"
    from nbdev.config import get_config
    lib = get_config().lib_path.name
    out = ['# API index', f'What `{lib}` offers, by what you want to do: each name links to its entry in the reference.\n'
           '{ .nb-description }']
    for group, rs in refs.items():
        out += [f'## {group}', api_table([(r.link(), r.doc) for r in rs])]
    public = {n for rs in refs.values() for r in rs for n in r.name.split(', ')} | {u.sym for us in API_GROUPS.values() for u in us if u.sym}
    others = other_names(public)
    out += ['---', '## Everything else, for contributors', f"The other names `{lib}`'s modules export (each imported from its "
            f'module: `{lib}.all` gives the ones above) and the fastai methods `{lib}` patches: '
            f'internals, documented for contributors. You need none of them to use `{lib}`.',
            f'??? abstract contributors "{sum(map(len, others.values()))} names, by module"']
    for mod, rows in others.items():
        page = next((p for _, p, _, _ in rows if p), '')
        head = f'**`{mod}`**' + (f' · [{titles[page]}]({page}.md)' if page in titles else '')
        table = api_table([(f'[`{n}`]({p}.md#{a})' if p in titles else f'`{n}`', d) for n, p, a, d in rows])
        out.append('\n'.join('    ' + l for l in f'{head}\n\n{table}'.splitlines()))
    return '\n\n'.join(out) + '\n'

# ---------------------------------------------------------------------------------------------- user-facing first
def use_box(page:str, refs:dict) -> str:
    "The 'Use from this page' box of `page`: its public names, linked, one line each; '' when it has none"
    rs = [r for rs in refs.values() for r in rs if r.page == page]
    if not rs: return ''
    return '!!! abstract use-box "Use from this page"\n\n' + '\n'.join(f'    - {r.link()}: {r.doc}' for r in rs)

INTERNALS_NOTE = ('!!! abstract contributors "Internals"\n\n    The entries on this page are internals, documented for '
                  'contributors: what you call is in the [API index](api.md).')

def after_description(md:str, block:str) -> str:
    "`md` with `block` right after its title and description"
    m = re.search(r'^\{ \.nb-description \}$', md, re.M) or re.search(r'^# .*$', md, re.M)
    return md[:m.end()] + '\n\n' + block + '\n' + md[m.end():] if m else block + '\n\n' + md

def mark_internal(md:str, public:set) -> str:
    "Each `show_doc` heading whose name is not public (nor a method of a public class) gets the class `sd-internal`"
    def f(m):
        a = nb_slugify(m.group(2).replace('\\', ''))
        pub = a in public or a.rpartition('.')[0] in public
        return m.group(0) if pub else f'{m.group(1)} {{ .nb-sd .sd-internal }}'
    return re.sub(r'^(#{1,6} (\S+)) \{ \.nb-sd \}$', f, md, flags=re.M)

def user_first(name:str, md:str, refs:dict) -> str:
    "A module page as readers need it: its public names in a box first, its other entries marked internal"
    if '.nb-sd }' not in md: return md
    public = {r.anchor for rs in refs.values() for r in rs if r.page == name}
    return mark_internal(after_description(md, use_box(name, refs) or INTERNALS_NOTE), public)
