"""Build the docs site into `docs/` without Quarto: nbdev's processed notebooks -> markdown -> MkDocs (material).

    python tools/docs.py            # process the notebooks, write the pages, `mkdocs build --strict`
    python tools/docs.py --serve    # the same, then `mkdocs serve` on 127.0.0.1:8000

How the site is built, and what is done by whom:
- nbdev processes the notebooks (`proc_nbs`: front matter, directives, `show_doc`, doc links, `#| hide`), with two settings
  for the docs build only, in nbdev's user config (`$XDG_CONFIG_HOME/nbdev/config.toml`, written in `_docs_build/`):
  `renderer` and `doc_procs`, both in `docsite/showdoc.py`;
- each processed notebook becomes `_docs_build/md/<page>.md` (`docsite/pages.py`), with the API index and each module
  page's box of public names (`docsite/api_index.py`), then the nav in sections (`_docs_build/nav.yml`, from the front
  matter: literate-nav or awesome-nav would read a nav file, still written here);
- MkDocs builds the site, `--strict`: material (theme, search, code copy), Python-Markdown's and pymdownx's extensions
  (admonitions, tables, details, highlighting, snippets of `examples/`), mkdocs-redirects (the pages' old addresses),
  its own link and anchor validation; its hooks are `docsite/hooks.py`.
Each module of `docsite/` says what of it no plugin does, and why (mkdocs-jupyter, mkdocstrings, autorefs, literate-nav
were weighed). Never run here: Quarto (its package downloads a binary at install); `nbdev-docs` builds with it.
"""
from __future__ import annotations
import argparse, importlib, os, re, shutil, subprocess, sys, time, warnings, yaml
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsite import ROOT, BUILD, STATIC, SITE, MD, DEFAULT_SECTION, DocsError
from docsite.hooks import NAV
from docsite.pages import Page, Linker, command_links, fix_anchors, heading_ids
from docsite.api_index import public_refs, blank_details, user_first, api_index

SECTIONS = ['Tutorials', 'How-to recipes', 'Explanations', 'API reference', 'Benchmarks']   # nav order
NBDEV_CFG = 'doc_procs = "docsite.showdoc:clean_outputs"\nrenderer = "docsite.showdoc.ApiRenderer"\n'
NBDEV_EXPORT_ADVICE = 'Found cells containing imports and other code'   # a warning of nbdev's that the build silences

def log(*a): print('[docs]', *a, flush=True)

def process_notebooks() -> Path:
    "nbdev's doc processing (`proc_nbs`, as `nbdev-proc-nbs` minus Quarto) of `nbs/` into `_proc/`, with our config"
    from nbdev.config import get_config
    from nbdev.serve import proc_nbs
    xdg = BUILD/'xdg'
    (xdg/'nbdev').mkdir(parents=True, exist_ok=True)
    (xdg/'nbdev'/'config.toml').write_text(NBDEV_CFG)
    os.environ['XDG_CONFIG_HOME'] = str(xdg)   # nbdev reads `renderer` and `doc_procs` from there; workers inherit it
    # nbdev's advice on exporting ("Found cells containing imports and other code", each with the cell's source): not
    # about the docs, and 30 of them buried the build's own messages. Quiet here and in nbdev's worker processes.
    warnings.filterwarnings('ignore', NBDEV_EXPORT_ADVICE, UserWarning)
    os.environ['PYTHONWARNINGS'] = ','.join(w for w in (os.environ.get('PYTHONWARNINGS'), f'ignore:{NBDEV_EXPORT_ADVICE}:UserWarning') if w)
    try: cache = proc_nbs(force=True, n_workers=min(os.cpu_count() or 1, 4))
    except Exception as e: raise DocsError(f'nbdev could not process the notebooks:\n{e}') from None
    srcs = sorted(p.name for p in get_config().nbs_path.glob('*.ipynb') if not p.name.startswith(('_', '.')))
    if missing := [n for n in srcs if not (cache/n).exists()]: raise DocsError(f'nbdev produced no output for {missing}')
    return cache

def room_title(page:str) -> str|None:
    "The nav's group of a page of a subpackage (`dist.ranks`): the subpackage's name and its docstring's first phrase (`dist: the ranks`)"
    from nbdev.config import get_config
    room, dot, _ = page.partition('.')
    if not dot or not (get_config().lib_path/room/'__init__.py').exists(): return None
    doc = (importlib.import_module(f'{get_config().lib_path.name}.{room}').__doc__ or '').split(': ', 1)[-1]
    return f"{room}: {re.split(r'[,;:.]', doc)[0].strip()}"

def write_pages(cache:Path):
    "Markdown for every processed notebook, the API index and `docs_src/`'s pages in `MD`; the nav, in sections, in `NAV`"
    if MD.exists(): shutil.rmtree(MD)
    MD.mkdir(parents=True)
    pages = sorted((Page(p) for p in cache.glob('*.ipynb') if not p.name.startswith(('_', '.'))), key=lambda p: p.nb_path.name)
    pages = [p for p in pages if not p.fm.get('skip_page')]   # `ddpsafe.core`, `.io`, `.checkpoint`: a path, no page (the redirects lead on)
    if len({p.name for p in pages}) < len(pages): raise DocsError(f'two notebooks become one page: {[p.name for p in pages]}')
    if 'index' not in {p.name for p in pages}: raise DocsError('no index.ipynb: the docs need a home page')
    from fastcore.nbio import frontmatter
    static = {f.stem: frontmatter(f.read_text(encoding='utf-8'))[0] for f in sorted(STATIC.glob('*.md'))}   # docs_src/ pages
    titles = {p.name: p.title for p in pages} | {'api': 'API index'} | {n: fm.get('title', n) for n, fm in static.items()}
    link = Linker(titles, {p.nb_path.name: p.name for p in pages})
    mds = {p.name: p.markdown(link) for p in pages}
    refs = public_refs(mds)
    if blank := blank_details(refs):
        raise DocsError('API index: entries whose parameters have no details; give each a docment (a comment after it):\n  '
                        + '\n  '.join(blank))
    mds = {n: user_first(n, md, refs) for n, md in mds.items()} | {'api': api_index(mds, refs, titles)}
    ids = {n: {a for _, a in heading_ids(m)} for n, m in mds.items()}
    for name, md in mds.items(): (MD/f'{name}.md').write_text(fix_anchors(md, ids), encoding='utf-8')
    for f in cache.rglob('*'):   # images and other files the notebooks refer to (nbdev copied them from nbs/)
        rel = f.relative_to(cache)
        if f.is_file() and f.suffix not in ('.ipynb', '.yml', '.yaml', '.qmd', '.py', '.md') and not any(p.startswith(('_', '.')) for p in rel.parts):
            (MD/rel).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, MD/rel)
    if STATIC.exists(): shutil.copytree(STATIC, MD, dirs_exist_ok=True)
    for n in static: (MD/f'{n}.md').write_text(command_links((MD/f'{n}.md').read_text(encoding='utf-8'), n), encoding='utf-8')
    write_nav(pages, static, titles)

def write_nav(pages:list, static:dict, titles:dict):
    "The nav in `NAV`: home, then the sections in order; the reference by room (`dist.ranks` under `dist`), bottom up"
    nav = {s: [] for s in SECTIONS}
    for p in pages:   # in the notebooks' order, which is the rooms' order
        if p.name == 'index': continue
        entry, group, room = {re.sub(r'`([^`]+)`', r'\1', p.title): f'{p.name}.md'}, nav.setdefault(p.section, []), room_title(p.name)
        if room and not (group and room in group[-1]): group.append({room: []})
        (group[-1][room] if room else group).append(entry)
    nav[DEFAULT_SECTION].append({'API index': 'api.md'})
    for n, fm in static.items(): nav.setdefault(fm.get('section', DEFAULT_SECTION), []).append({titles[n]: f'{n}.md'})
    nav = {'Home': 'index.md'} | {s: ps for s, ps in nav.items() if ps}
    NAV.write_text(yaml.safe_dump([{k: v} for k, v in nav.items()], sort_keys=False, allow_unicode=True), encoding='utf-8')

def build_date() -> str:
    "The time of the last commit that touched the notebooks, for reproducible sitemap dates"
    r = subprocess.run(['git', 'log', '-1', '--format=%ct', '--', 'nbs'], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() or str(int(time.time()))

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--no-proc', action='store_true', help='reuse _proc/ as it is (faster; stale if notebooks changed)')
    ap.add_argument('--serve', action='store_true', help='then run `mkdocs serve` on 127.0.0.1:8000')
    a = ap.parse_args()
    os.chdir(ROOT); sys.path.insert(0, str(ROOT))
    t0 = time.monotonic()
    try:
        cache = ROOT/'_proc' if a.no_proc and (ROOT/'_proc').exists() else process_notebooks()
        log(f'writing pages into {MD.relative_to(ROOT)}/ ...')
        write_pages(cache)
    except DocsError as e: sys.exit(f'[docs] ERROR: {e}')
    env = dict(os.environ, NO_MKDOCS_2_WARNING='1', SOURCE_DATE_EPOCH=os.environ.get('SOURCE_DATE_EPOCH', build_date()))
    mkdocs, conf = [sys.executable, '-m', 'mkdocs'], ROOT/'mkdocs.yml'
    if a.serve: os.execvpe(sys.executable, mkdocs + ['serve', '-f', str(conf), '-a', '127.0.0.1:8000'], env)
    if subprocess.run(mkdocs + ['build', '--strict', '--clean', '-f', str(conf)], env=env).returncode:
        sys.exit('[docs] ERROR: mkdocs build failed')
    (SITE/'.nojekyll').touch()   # GitHub Pages: serve the site as it is
    log(f'site in {SITE.relative_to(ROOT)}/ in {time.monotonic()-t0:.1f}s')

if __name__ == '__main__': main()
