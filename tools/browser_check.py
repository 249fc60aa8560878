"""Load the built docs site in headless Chromium, offline, and fail on anything broken.

    python tools/browser_check.py [--site docs] [--shots .ci/artifacts]

The site is served from `--site` by Python's http.server on 127.0.0.1 (a free port), under the path of
`site_url` in mkdocs.yml (`/ddpsafe/`, as on GitHub Pages). Chromium runs with every host but 127.0.0.1
unreachable. The check fails on:
- a page or file that does not exist: any request to the server answered 4xx/5xx (pages, links found in
  pages, scripts, styles, images, the search index), or a link to an anchor that its page does not have;
- a page that loads a script, style, font or image from another host (the site must work offline);
- a JavaScript error on a page (Chromium's console log: `Uncaught ...`, or console errors);
- a page whose main content (`.md-content` / `<article>`) is empty once its scripts have run;
- a page missing from the search index;
- a link to another site than this one and the project's repository (`site_url` and `repo_url` in mkdocs.yml).
Then what a reader sees, page by page, at 1280 px and at 390 px wide (`reader_problems`):
- fastai progress-bar glyphs, build-machine paths (`/tmp/...`, home folders, CI runners) or the project's internal
  notes (`ENV.md`) in the text;
- an API entry (`.sd-entry`, from show_doc) whose signature takes parameters but that has no parameter table;
- an image without alt text that says what it shows (missing, or "output"), wider than the content, or (at 1280 px)
  drawn more than `MAX_SHRINK` times wider than it is shown, so that its text becomes too small to read;
- a page wider than the window (a code block scrolls inside its own box instead), or code that breaks a line inside a
  name (`'accurac|y'`, `ddpsafe-|ls`): a code block must keep its lines, inline code may break between names only;
- a heading whose text shows markdown that did not render (`**call**`, `{ #anchor .nb-sd }`);
- at 390 px: a copy button over code; on the landing page, the tutorials and the how-to pages, an end-of-line
  comment cut at the window's edge (put it on a line of its own) and `ddpsafe-ls`'s best mark out of sight; the
  best-model page must show that mark.
It reports, without failing, build noise in what the pages show (`noise_problems`): a Python warning, fastai's epoch
table header printed as plain text, a raw list of recorder values.
It saves screenshots of the first screen of the landing page, the quick start, the best-model page, the checkpoint page,
the CLI page and the API index, at
1280 px (1280x900) and 390 px (390x844, a phone) wide, to `--shots`: `index-1280.png`, `index-390.png`, ...; and of the
pages given with `--page` (`--page howto-existing-script=existing_script.html`), `--screens` screens tall.
`--shots-only` takes the screenshots without the check (for pages to commit, say).
"""
from __future__ import annotations
import argparse, functools, html.parser, http.server, os, re, shutil, subprocess, sys, tempfile, threading, time
import urllib.error, urllib.parse, urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync', '--disable-default-apps', '--disable-extensions',
         '--mute-audio', '--hide-scrollbars',
         '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1']   # offline: only our server resolves

SHOTS = {'index': 'index.html', 'quickstart': 'quickstart.html', 'best_model': 'best_model.html', 'checkpoint': 'callback.checkpoint.html',
         'cli': 'cli.html', 'api': 'api.html'}
WIDTHS = (1280, 390)
SCREENS = {1280: 900, 390: 844}   # window height at each width: a laptop's first screen, a phone's
MAX_SHRINK = 3.0   # a figure drawn at 200 dpi, shown at 1/3 of its pixels: ~67 px per inch, 8 pt text at ~7.5 px
_glyphs = re.compile(r'[█▉▊▋▌▍▎▏]|\d+\.\d+% \[\d+/\d+')
# /dev/shm/ddpsafe-USER-KEY (or -*, -..., /dev/shm/.../): the memory tier's folder as the docs write it, with placeholders
_paths = re.compile(r'(?<![\w.~-])(?:/tmp/|/var/tmp/|/dev/shm/(?!ddpsafe-(?:USER-KEY|\*|\.\.\.)|\.\.\./)|/private/var/|/var/folders/|/home/\w|/Users/\w|/root/|/work/|'
                    r'/github/workspace|/home/runner|/builds/|[A-Z]:\\Users\\)|site-packages/')
_redirect = re.compile(r'<meta http-equiv="refresh" content="0; url=([^"]+)"')   # mkdocs-redirects' stub for a moved page
_internal = re.compile(r'\bENV\.md\b|\bshared/\w+\.md\b')
_bad_alt = {'', 'output', 'image', 'figure', 'png', 'img', 'plot'}
_unrendered = re.compile(r'\*\*|\{\s*[#.:]|\.nb-sd\b')   # in a heading's text (code spans aside): markdown left as it was
_noise = [(re.compile(r'\b\w*Warning: '), 'a Python warning'),
          (re.compile(r'^\s*epoch\s+train_loss\b.*$', re.M), "fastai's epoch table header as plain text"),
          (re.compile(r'^\s*\[\[?-?\d+\.\d{4,},\s*-?\d+\.\d+', re.M), 'a raw list of recorder values')]

def chromium_path() -> str|None:
    "The Chromium (or Chrome) on PATH, if any"
    return next((p for n in ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable', 'chrome') if (p := shutil.which(n))), None)

def find_chromium() -> str:
    return chromium_path() or sys.exit('browser_check: no Chromium found; install it with `apt-get install -y chromium`')

# what a reader sees: measured in the page by this script, injected by the server into `page.html?reader`
READER_JS = """(function(){
function run(){
  var de = document.documentElement, main = document.querySelector('article') || document.querySelector('.md-content') || document.body;
  var box = main.getBoundingClientRect(), r = {viewport: de.clientWidth, scroll: Math.max(de.scrollWidth, document.body.scrollWidth),
           broken: [], imgs: [], entries: []};
  main.querySelectorAll('code').forEach(function(c){   // a line of code broken inside a name
    if (c.closest('pre') ? getComputedStyle(c).whiteSpace === 'pre' : c.getClientRects().length < 2) return;
    var w = brokenName(c); if (w) r.broken.push(w); });
  main.querySelectorAll('img').forEach(function(i){ var b = i.getBoundingClientRect();
    r.imgs.push({src: i.getAttribute('src'), alt: i.getAttribute('alt'), shown: b.width, natural: i.naturalWidth,
                 outside: b.width > 0 && (b.left < box.left - 1 || b.right > box.right + 1)}); });
  r.headings = []; main.querySelectorAll('h1,h2,h3,h4,h5,h6').forEach(function(h){ var c = h.cloneNode(true);
    c.querySelectorAll('code,.headerlink').forEach(function(x){ x.remove(); }); r.headings.push(c.textContent.trim()); });
  r.outputs = []; main.querySelectorAll('pre').forEach(function(p){ if (!p.closest('table')) r.outputs.push(p.innerText); });
  main.querySelectorAll('.sd-entry').forEach(function(e){ var h = e.querySelector('h1,h2,h3,h4,h5,h6'), c = e.querySelector('pre');
    r.entries.push({name: h ? (h.id || h.textContent) : '?', sig: c ? c.textContent : '', table: !!e.querySelector('table')}); });
  r.pres = []; main.querySelectorAll('pre').forEach(function(p){   // what of each code block shows without scrolling
    var c = p.querySelector('code') || p, b = p.querySelector('.md-code__nav, .md-clipboard'), text = c.innerText;
    r.pres.push({out: !!p.closest('.nb-out, .nb-output'), text: text, cols: visibleColumns(c), under: b ? textUnder(c, b) : null}); });
  var s = document.createElement('script'); s.type = 'application/json'; s.id = '__reader';
  s.textContent = JSON.stringify(r).replace(/</g, '\\u003c'); document.body.appendChild(s);
}
function visibleColumns(c){   // how many characters of a line show in code block `c` before it must scroll
  var cs = getComputedStyle(c), m = document.createElement('span');
  m.textContent = '0000000000'; m.style.visibility = 'hidden'; m.style.position = 'absolute'; c.appendChild(m);
  var w = m.getBoundingClientRect().width / 10; c.removeChild(m);
  return w ? Math.floor((c.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)) / w) : 0;
}
function textUnder(c, button){   // the line of code that a copy button covers, if it covers any character
  var bb = button.getBoundingClientRect(); if (!bb.width || !bb.height) return null;
  var tw = document.createTreeWalker(c, NodeFilter.SHOW_TEXT), rg = document.createRange(), n;
  while ((n = tw.nextNode())) for (var i = 0; i < n.data.length; i++){
    if (/\\s/.test(n.data[i])) continue;
    rg.setStart(n, i); rg.setEnd(n, i + 1);
    var q = rg.getBoundingClientRect();
    if (q.top > bb.bottom) return null;
    if (q.right > bb.left && q.left < bb.right && q.bottom > bb.top && q.top < bb.bottom)
      return (n.data.slice(Math.max(0, i - 30), i) + '|' + n.data.slice(i, i + 10)).trim();
  }
  return null;
}
function brokenName(el){   // where `el`'s text goes on to a new line between two characters of one name, if it does
  var tw = document.createTreeWalker(el, NodeFilter.SHOW_TEXT), rg = document.createRange(), top = null, prev = '', n;
  while ((n = tw.nextNode())) for (var i = 0; i < n.data.length; i++){
    var ch = n.data[i];
    if (ch === '\\n') { top = null; prev = ''; continue; }
    rg.setStart(n, i); rg.setEnd(n, i + 1);
    var rs = rg.getClientRects();   // none for a space where a line was broken: it still ends the name before it
    if (rs.length && top !== null && rs[0].top > top + 2 && /[\\w-]/.test(ch) && /[\\w-]/.test(prev))
      return (n.data.slice(Math.max(0, i - 30), i) + '|' + n.data.slice(i, i + 20)).trim();
    if (rs.length) top = rs[0].top;
    prev = ch;
  }
  return null;
}
if (document.readyState === 'complete') run(); else window.addEventListener('load', function(){ setTimeout(run, 50); });
})();"""

# ---------------------------------------------------------------------------------------------------------- server
class Server:
    "http.server in a thread, serving `root` under `prefix`; records every request and its status"
    def __init__(self, root:Path, prefix:str):
        self.log, prefix = [], '/' + prefix.strip('/') + '/' if prefix.strip('/') else '/'
        srv = self
        class H(http.server.SimpleHTTPRequestHandler):
            def translate_path(self, path):
                p = urllib.parse.urlsplit(path).path
                if not p.startswith(prefix): return str(root/'\0nonexistent')   # outside the site: 404
                return super().translate_path('/' + p[len(prefix):])
            def do_GET(self):
                sp = urllib.parse.urlsplit(self.path)
                f = Path(self.translate_path(self.path))
                if sp.query != 'reader' or f.suffix != '.html' or not f.is_file(): return super().do_GET()
                body = f.read_bytes().replace(b'</body>', b'<script>' + READER_JS.encode() + b'</script></body>', 1)
                self.send_response(200); self.send_header('Content-Type', 'text/html; charset=utf-8')
                self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
            def log_request(self, code='-', size='-'):
                srv.log.append((self.command, self.path, int(code) if str(code).isdigit() else 0,
                                self.headers.get('Referer', '')))
            def log_message(self, *a): pass
        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(H, directory=str(root)))
        self.base = f'http://127.0.0.1:{self.httpd.server_address[1]}{prefix}'
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
    def close(self): self.httpd.shutdown(); self.httpd.server_close()

# ---------------------------------------------------------------------------------------------------------- parse
class Links(html.parser.HTMLParser):
    "Every URL a page links to or loads, the ids it defines, and the text of its main content"
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links, self.loads, self.ids, self.main, self._depth, self._skip = [], [], set(), [], 0, 0
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ('id', 'name'):
            if a.get(k) and (k == 'id' or tag == 'a'): self.ids.add(a[k])
        if tag == 'a' and a.get('href'): self.links.append(a['href'])
        if tag in ('script', 'img', 'iframe', 'source', 'audio', 'video') and a.get('src'): self.loads.append(a['src'])
        if tag == 'link' and a.get('href') and set((a.get('rel') or '').split()) & {'stylesheet', 'icon', 'preload', 'modulepreload', 'manifest'}:
            self.loads.append(a['href'])
        cls = (a.get('class') or '').split()
        if self._depth: self._depth += 1
        elif tag == 'article' or 'md-content' in cls: self._depth = 1
        if self._depth and tag in ('script', 'style'): self._skip += 1
    def handle_endtag(self, tag):
        if self._depth and tag in ('script', 'style') and self._skip: self._skip -= 1
        if self._depth: self._depth -= 1
    def handle_data(self, data):
        if self._depth and not self._skip: self.main.append(data)

def parse(text:str) -> Links:
    p = Links(); p.feed(text); p.close(); return p

# ---------------------------------------------------------------------------------------------------------- chromium
def chromium(exe:str, url:str, *extra:str, timeout:float=60) -> tuple[str, str]:
    "Run headless Chromium on `url` in a fresh profile; its stdout and its log"
    with tempfile.TemporaryDirectory(prefix='chromium-') as prof:
        cmd = [exe, *FLAGS, f'--user-data-dir={prof}', '--enable-logging=stderr', '--v=0',
               '--virtual-time-budget=5000', *extra, url]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return r.stdout, r.stderr

_console = re.compile(r':CONSOLE[:(]\d*\)?\]?\s*"(.*)", source: (\S*) \((\d+)\)')
def js_errors(log:str) -> tuple[list[str], list[str]]:
    "Console messages in Chromium's log: (errors, other messages)"
    errs, other = [], []
    for line in log.splitlines():
        if m := _console.search(line):
            msg = f'{m.group(1)} ({m.group(2)}:{m.group(3)})'
            bad = 'Uncaught' in m.group(1) or re.search(r'\b(Error|TypeError|ReferenceError|SyntaxError)\b', m.group(1)) \
                  or ':ERROR:CONSOLE' in line
            (errs if bad else other).append(msg)
    return errs, other

# ---------------------------------------------------------------------------------------------------------- reader
def read_page(exe:str, url:str, width:int) -> tuple[dict, str, str]:
    "Load `url` (served by `Server`) in Chromium `width` px wide: what `READER_JS` measured, the DOM, Chromium's log"
    dom, log = chromium(exe, url + '?reader', '--dump-dom', f'--window-size={width},900')
    m = re.search(r'<script type="application/json" id="__reader">(.*?)</script>', dom, re.S)
    import json
    return (json.loads(m.group(1)) if m else {}), dom, log

def text_problems(text:str) -> list[str]:
    "Progress-bar glyphs, build-machine paths and internal notes in a page's text"
    res = []
    for rx, what in ((_glyphs, 'a progress bar'), (_paths, 'a build-machine path'), (_internal, "the project's internal notes")):
        if m := rx.search(text): res.append(f'shows {what}: {text[max(0, m.start()-40):m.end()+40]!r}')
    return res

def takes_params(sig:str) -> bool:
    "Whether a rendered signature (`def f(a, b=1)`, `class C(x)`) has parameters"
    m = re.search(r'\((.*)\)', sig, re.S)
    return bool(m and [p for p in m.group(1).split(',') if p.strip() and p.strip() not in ('self', '*', '/')])

_eol_comment = re.compile(r'\S\s+(#\s.*)$')                          # code, then a comment, on one line
_ls_best = re.compile(r'^step-\d+\s+best\b', re.M)                     # ddpsafe-ls's mark of the best checkpoint
def code_problems(pres:list, width:int, story:bool) -> list[str]:
    """Code blocks on a phone (`width` up to 500 px): a copy button over code, on any page; on a tutorial or how-to
    page (`story`), an end-of-line comment cut at the window's edge and `ddpsafe-ls`'s best mark out of sight.
    (On a wide screen the button still covers the end of a line long enough to reach it, as on most sites)"""
    if width > 500: return []
    res = [f'at {width} px: the copy button covers code: {p["under"]!r}' for p in pres if p.get('under')]
    if not story: return res
    for p in pres:
        if p['out'] or not p['cols']: continue
        for line in p['text'].splitlines():
            if (m := _eol_comment.search(line)) and m.end(1) > p['cols']:
                res.append(f'at {width} px: an end-of-line comment is cut at the window\'s edge ({p["cols"]} characters show): '
                           f'{line.strip()!r}; put it on a line of its own'); break
    for p in pres:
        if p['cols'] and any(m.end() - m.start() > p['cols'] for m in _ls_best.finditer(p['text'])):
            res.append(f'at {width} px: ddpsafe-ls\'s "best" mark is out of sight ({p["cols"]} characters show)')
    return res

def story_pages() -> set[str]:
    "The landing page, the tutorials and the how-to pages: their examples are read on phones too"
    import json
    res = {'index.html'}
    for nb in (ROOT/'nbs').glob('*.ipynb'):
        head = ''.join(next((c['source'] for c in json.loads(nb.read_text())['cells'][:3] if '- section:' in ''.join(c['source'])), []))
        if re.search(r'^- section: (Tutorials|How-to recipes)\s*$', head, re.M): res.add(re.sub(r'^\d+[a-z]?_', '', nb.stem) + '.html')
    return res
MUST_SHOW = {'best_model.html': (_ls_best, "ddpsafe-ls's best mark")}   # what a page is for: it must be there

def reader_problems(r:dict, width:int, story:bool=False) -> list[str]:
    """What is wrong with a page as `READER_JS` measured it at `width` px; `story`: a tutorial or how-to page, whose
    examples are read on a phone too"""
    if not r: return [f'at {width} px: the page did not run its measurements']
    res = code_problems(r.get('pres', []), width, story)
    if r['scroll'] > r['viewport'] + 1: res.append(f'at {width} px: the page is {r["scroll"] - r["viewport"]} px wider than the window')
    res += [f'at {width} px: code breaks inside a name: {w!r}' for w in r.get('broken', [])]
    res += [f'a heading shows markdown that did not render: {h!r}' for h in r.get('headings', []) if _unrendered.search(h)]
    for e in r['entries']:
        if not e['sig']: res.append(f'API entry {e["name"]} shows no signature')
        elif takes_params(e['sig']) and not e['table']: res.append(f'API entry {e["name"]} has parameters but no parameter table')
    for i in r['imgs']:
        if (i['alt'] or '').strip().lower() in _bad_alt: res.append(f'image {i["src"]} has no alt text that says what it shows (alt={i["alt"]!r})')
        if i['outside']: res.append(f'at {width} px: image {i["src"]} is wider than the content')
        if width >= 1000 and i['shown'] and i['natural'] > MAX_SHRINK * i['shown']:
            res.append(f'image {i["src"]} is drawn {i["natural"]} px wide and shown at {i["shown"]:.0f} px: its text is too small to read')
    return res

def noise_problems(r:dict) -> list[str]:
    "Build noise in a page's code blocks and outputs: a warning, fastai's epoch header as text, raw recorder values"
    res = []
    for out in r.get('outputs', []):
        for rx, what in _noise:
            if m := rx.search(out): res.append(f'shows {what}: {m.group(0).strip()[:100]!r}')
    return res

# ---------------------------------------------------------------------------------------------------------- check
def site_config() -> dict:
    "mkdocs.yml, as yaml reads it (without its `!!python` tags)"
    import yaml
    f = ROOT/'mkdocs.yml'
    return yaml.load(f.read_text(), Loader=yaml.BaseLoader) if f.exists() else {}

def site_prefix() -> str:
    "The path of `site_url` in mkdocs.yml (`/ddpsafe/`), where GitHub Pages will serve the site"
    return urllib.parse.urlsplit(site_config().get('site_url', '/')).path

def allowed_hosts() -> list[str]:
    "URL prefixes a page may link to besides its own site: `site_url`, and the repository (`repo_url`, or the GitHub link)"
    cfg = site_config()
    repo = cfg.get('repo_url') or next((s['link'] for s in (cfg.get('extra') or {}).get('social', []) if 'github.com' in s.get('link', '')), None)
    return [u.rstrip('/') for u in (cfg.get('site_url'), repo) if u]

def take_shots(exe:str, base:str, pages:set, shots:Path, extra:dict, screens:int, fail):
    "Screenshots, as a reader sees the pages: `SHOTS` one screen tall, `extra` (name -> page) `screens` tall; each width"
    shots.mkdir(parents=True, exist_ok=True)
    for name, page, n in [(k, v, 1) for k, v in SHOTS.items()] + [(k, v, screens) for k, v in extra.items()]:
        if page not in pages: fail(f'no page {page} to take a screenshot of'); continue
        for width in WIDTHS:
            shot = shots/f'{name}-{width}.png'; shot.unlink(missing_ok=True)
            chromium(exe, base + page, f'--screenshot={shot}', f'--window-size={width},{SCREENS[width]*n}')
            if not shot.exists() or shot.stat().st_size < 1000: fail(f'no screenshot written to {shot}')
            else: print(f'  screenshot: {shot} ({shot.stat().st_size // 1024} KB)')

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--site', default=str(ROOT/'docs'), help='the built site (default docs/)')
    ap.add_argument('--shots', default=str(ROOT/'.ci/artifacts'), help='folder for the screenshots (index, checkpoint, cli, api; each at 1280 and 390 px)')
    ap.add_argument('--prefix', default=None, help="URL path to serve the site under (default: site_url's path in mkdocs.yml)")
    ap.add_argument('--min-text', type=int, default=40, help='fewest characters of text a page\'s main content may have')
    ap.add_argument('--page', action='append', default=[], metavar='[NAME=]PAGE',
                    help='one more page to take screenshots of, as NAME-1280.png and NAME-390.png (NAME: the page\'s name)')
    ap.add_argument('--screens', type=int, default=1, help='how many screens tall the screenshots of --page are (default 1)')
    ap.add_argument('--shots-only', action='store_true', help='take the screenshots only, without checking the site')
    a = ap.parse_args()
    site = Path(a.site).resolve()
    if not (site/'index.html').exists(): sys.exit(f'browser_check: {site}/index.html does not exist: build the docs first (bash tools/docs.sh)')
    exe = find_chromium()
    srv = Server(site, a.prefix if a.prefix is not None else site_prefix())
    base, host = srv.base, urllib.parse.urlsplit(srv.base).netloc
    fails, t0, allowed = [], time.monotonic(), allowed_hosts()
    def fail(msg):
        if msg not in fails: fails.append(msg); print('  FAIL', msg, flush=True)
    print(f'browser_check: serving {site} at {base} ({exe})', flush=True)
    extra = {(n if p else Path(n).stem): (p or n) for n, _, p in (x.partition('=') for x in a.page)}
    if a.shots_only:
        take_shots(exe, base, {p.relative_to(site).as_posix() for p in site.rglob('*.html') if not _redirect.search(p.read_text(errors='replace'))},
                   Path(a.shots).resolve(), extra, a.screens, fail)
        srv.close(); sys.exit(1 if fails else 0)

    # every HTML page of the site, plus every internal URL found in them (crawled); a page's old address (mkdocs-redirects'
    # stub, `core.html`) is no page: it must lead to one that exists
    moved = {p: m.group(1) for p in site.rglob('*.html') if (m := _redirect.search(p.read_text(encoding='utf-8', errors='replace')))}
    for p, to in moved.items():
        if not (p.parent/to.split('#')[0]).is_file(): fail(f'{p.relative_to(site).as_posix()}: an old address that leads to {to}, which does not exist')
    pages = {base + p.relative_to(site).as_posix() for p in site.rglob('*.html') if p not in moved}
    fetched, anchors, queue, found_on = {}, [], sorted(pages), {}
    while queue:
        url = queue.pop(0)
        if url in fetched: continue
        try:
            with urllib.request.urlopen(url, timeout=30) as r: body, ctype = r.read(), r.headers.get_content_type()
        except urllib.error.HTTPError as e: fetched[url] = None; continue   # the server log reports it
        except OSError as e: fetched[url] = None; fail(f'{url}: {e}'); continue
        fetched[url] = parse(body.decode('utf-8', 'replace')) if ctype == 'text/html' else None
        if fetched[url] is None: continue
        p = fetched[url]
        for ref, loads in [(r, False) for r in p.links] + [(r, True) for r in p.loads]:
            if ref.startswith(('mailto:', 'javascript:', 'data:', 'tel:')): continue
            full = urllib.parse.urljoin(url, ref)
            sp = urllib.parse.urlsplit(full)
            if sp.netloc != host:
                if loads and sp.scheme in ('http', 'https', ''): fail(f'{url}: loads {full} from another host (the site must work offline)')
                elif not loads and not any(full == a or full.startswith(a + '/') or full.startswith(a + '#') for a in allowed):
                    fail(f'{url}: links to {full}, outside the site and the project\'s repository')
                continue
            target = urllib.parse.urlunsplit(sp._replace(fragment='', query=''))
            if target.endswith('/'): target += 'index.html'
            if sp.fragment and not loads: anchors.append((url, target, urllib.parse.unquote(sp.fragment)))
            found_on.setdefault(urllib.parse.urlsplit(target).path, url)
            if target not in fetched and target not in queue: queue.append(target)
    for src, target, frag in anchors:
        p = fetched.get(target)
        if p is not None and frag not in p.ids: fail(f'{src}: links to {target}#{frag}, which has no such anchor')

    # the search index (mkdocs' search plugin): every page in it
    idx = site/'search'/'search_index.json'
    if not idx.exists(): fail(f'{idx} is missing: the search box has nothing to search')
    else:
        import json
        try: docs = json.loads(idx.read_text())['docs']
        except (ValueError, KeyError) as e: docs = []; fail(f'{idx} is not a search index: {e}')
        indexed = {d['location'].split('#')[0] or 'index.html' for d in docs}
        for u in sorted(pages):
            rel = u[len(base):]
            if not rel.endswith('404.html') and rel not in indexed: fail(f'search index has no entry for {rel}')

    # each page in Chromium, at each width: JavaScript errors, the rendered main content, what a reader sees
    n_pages, noise, stories = 0, [], story_pages()
    for url in sorted(u for u in pages if not u.endswith('/404.html')):
        n_pages += 1
        for width in WIDTHS:
            r, dom, log = read_page(exe, url, width)
            errs, other = js_errors(log)
            for e in errs: fail(f'{url}: JavaScript error: {e}')
            for o in other: print(f'  note {url}: console: {o}')
            text = re.sub(r'\s+', ' ', ''.join(parse(dom).main)).replace('¶', '').strip()
            if not dom.strip(): fail(f'{url}: Chromium returned no DOM'); continue
            if len(text) < a.min_text: fail(f'{url}: main content is empty ({len(text)} characters: {text[:80]!r})')
            rel = url[len(base):] or 'index.html'
            for prob in text_problems(text) + reader_problems(r, width, rel in stories): fail(f'{url}: {prob}')
            if rel in MUST_SHOW and not any(MUST_SHOW[rel][0].search(p['text']) for p in r.get('pres', [])):
                fail(f'{url}: shows no {MUST_SHOW[rel][1]}')
            if width == WIDTHS[0]: noise += [f'{url[len(base):]}: {n}' for n in noise_problems(r)]
        print(f'  read {url[len(base):] or "index.html"}: {len(text)} characters of content', flush=True)

    for n in noise: print(f'  noise (reported, not failed: the notebooks print it) {n}')

    take_shots(exe, base, {u[len(base):] for u in pages}, Path(a.shots).resolve(), extra, a.screens, fail)

    time.sleep(0.2)
    srv.close()
    for method, path, code, ref in srv.log:
        ref = ref or found_on.get(urllib.parse.urlsplit(path).path, '')
        if code >= 400: fail(f'{method} {path} -> {code}' + (f' (linked or loaded from {ref})' if ref else ''))
    n_req = len(srv.log)
    print(f'browser_check: {n_pages} pages in Chromium ({len(moved)} old addresses lead to theirs), {len(fetched)} URLs crawled, {n_req} requests, '
          f'{len(fails)} problems, {len(noise)} noise reports, {time.monotonic()-t0:.1f}s')
    if fails:
        print('browser_check: FAILED'); sys.exit(1)
    print('browser_check: OK')

if __name__ == '__main__': main()
