/*
 * app.js -- Smolder's web UI.  Plain JavaScript, no framework,
 * no library, no network beyond this server: it is embedded in the binary
 * (cmake/embed_ui.cmake, querier/webui.c) and works offline.
 *
 * Decisions, and why:
 * - Everything that defines a view is in the URL query string (service,
 *   type, from/until, label filters, explored label, tab, search, focus
 *   path, icicle, sort, sandwich function, both sides of a comparison), so
 *   a copied link reproduces the view.  Clicks that change what is shown
 *   push a history entry (Back works); typing in search replaces it.
 *   The tenant is NOT in the URL (a link must not leak it): it is kept in
 *   localStorage and sent as X-Scope-OrgID.
 * - Multi-tenancy is detected, not configured: the first 401 opens a dialog
 *   asking once for the tenant, or for an API key when the 401 carries
 *   WWW-Authenticate (the server checks keys, -auth.keys-file); every later
 *   request carries it.  The key is a secret: it is kept in sessionStorage
 *   (this tab only) and sent as Authorization: Bearer, never put in a URL.
 * - Only the public API is used: Connect querier.v1 (JSON codec) for
 *   ProfileTypes, LabelNames, LabelValues and SelectSeries (timeline and
 *   the tag explorer's shares), /render for flamegraphs (flamebearer JSON,
 *   the format Pyroscope's UI reads).
 * - Comparison: the server's /render-diff (double flamebearer, one fan-out
 *   for both sides) draws the diff; the two sides' own flamegraphs come
 *   from /render.  A server or proxy that answers 404/405 for /render-diff
 *   (an older Smolder, a Pyroscope-compatible endpoint without it) gets the
 *   same double tree computed here from the two /render answers
 *   (diffTries), through the same decoder.
 * - Top changes (comparison view): the server's /api/top-changes ranks the
 *   functions by the rise of their share between the two sides; a click
 *   draws that function's series (/api/function-timeline, every sample
 *   with it anywhere in the stack) as a line over the timeline, scaled to
 *   the timeline's step.  A server without these routes (404) hides the
 *   table.
 * - Adhoc files are parsed in the browser (pprof, gzipped or not, and
 *   folded/collapsed text in UTF-8 or UTF-16): nothing is uploaded, so the
 *   file is never stored and a querier-only process needs no decoder.
 * - Flamegraphs are drawn on a canvas from columnar typed arrays; frames
 *   narrower than half a pixel are skipped (their children are narrower
 *   still), text is drawn only where it fits, so 10,000+ nodes redraw in
 *   a few milliseconds.  Colour is by package (frames of one package share
 *   a colour); in a comparison, by relative change of the frame's share of
 *   its side's total (red = grew, green = shrank, legend shown).
 * - Units come from the profile type's sample unit: nanoseconds are shown
 *   as time, bytes as KiB/MiB/GiB, anything else as a count.
 * - A page /render?format=html exported carries the /render answer in a
 *   JSON island (#smolder-profile): the UI then shows it with no server
 *   (showStandalone) -- it may have been opened from a file -- without the
 *   pickers, timeline, comparison, adhoc files and pprof export, and
 *   leaves the URL alone.
 * - pprof export asks the server's SelectMergeProfile (proto codec: the
 *   answer body is the google.v1.Profile itself) for the selected service,
 *   type, filters and range, and gzips it as `go tool pprof` files usually
 *   are; a comparison or an adhoc file has no single stored profile, so
 *   the button is off there.
 */
'use strict';

const $ = (id) => document.getElementById(id);
const ROW = 18;

/* ---------------------------------------------------------------- state */

const DEFAULTS = {
  service: '', type: '', from: 'now-1h', until: 'now', filters: '', groupBy: '',
  view: 'flame', search: '', focus: '', icicle: '1', sort: 'self:desc',
  sandwich: '', lfrom: '', luntil: '', lsel: '', rfrom: '', runtil: '', rsel: '',
  fn: '',
};
let S = readURL();
/* A page /render?format=html wrote: no server behind it (showStandalone). */
let STANDALONE = false;

function readURL() {
  const p = new URLSearchParams(location.search);
  const s = { ...DEFAULTS };
  for (const k of Object.keys(s)) if (p.has(k)) s[k] = p.get(k);
  return s;
}

function writeURL(push) {
  if (STANDALONE) return; /* a file's URL is not the view's */
  const p = new URLSearchParams();
  for (const k of Object.keys(DEFAULTS)) if (S[k] !== DEFAULTS[k]) p.set(k, S[k]);
  const qs = p.toString();
  const url = location.pathname + (qs ? '?' + qs : '');
  if (url !== location.pathname + location.search)
    history[push ? 'pushState' : 'replaceState'](null, '', url);
}

/* ------------------------------------------------------------------ API */

class ApiError extends Error {
  constructor(status, message, path) { super(message); this.status = status; this.path = path; }
}

let tenant = localStorage.getItem('smolder.tenant') || '';
let apiKey = sessionStorage.getItem('smolder.key') || '';
let tenantAsk = null;
const TENANT_PATTERN = "[A-Za-z0-9!\\-_.*'()]{1,150}";

function askTenant(keyMode) {
  if (tenantAsk) return tenantAsk;
  const dlg = $('tenantDlg'), inp = $('tenantIn');
  $('tenantAskText').textContent = keyMode
    ? 'This server needs an API key (sent as Authorization: Bearer, kept for this tab only):'
    : 'This server has multi-tenancy on. Tenant (X-Scope-OrgID):';
  inp.type = keyMode ? 'password' : 'text';
  if (keyMode) inp.removeAttribute('pattern'); else inp.setAttribute('pattern', TENANT_PATTERN);
  inp.value = keyMode ? '' : tenant;
  tenantAsk = new Promise((resolve) => {
    dlg.onclose = () => {
      tenantAsk = null;
      const v = inp.value.trim();
      if (dlg.returnValue === 'ok' && v) {
        if (keyMode) {
          apiKey = v;
          sessionStorage.setItem('smolder.key', v);
        } else {
          tenant = v;
          localStorage.setItem('smolder.tenant', v);
        }
        showTenant();
        resolve(true);
      } else resolve(false);
    };
    dlg.showModal();
  });
  return tenantAsk;
}

function showTenant() {
  const b = $('tenantBtn');
  b.hidden = !tenant && !apiKey;
  b.textContent = apiKey ? 'API key set' : 'Tenant: ' + tenant;
}

async function api(path, opts = {}) {
  const headers = { ...(opts.headers || {}) };
  if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
  else if (tenant) headers['X-Scope-OrgID'] = tenant;
  let r;
  try {
    r = await fetch(path, { method: opts.method || 'GET', body: opts.body, headers });
  } catch (e) {
    throw new ApiError(0, 'network error: ' + e.message, path);
  }
  if (r.status === 401 && !opts.retried) {
    /* WWW-Authenticate: the server checks API keys; a key it refused is
     * dropped before asking for another. */
    const keyMode = /^(Bearer|Basic)\b/i.test(r.headers.get('WWW-Authenticate') || '');
    if (keyMode && apiKey) { apiKey = ''; sessionStorage.removeItem('smolder.key'); }
    if (await askTenant(keyMode)) return api(path, { ...opts, retried: true });
  }
  if (!r.ok) {
    let msg = (await r.text()).trim();
    try { const j = JSON.parse(msg); if (j.message) msg = (j.code ? j.code + ': ' : '') + j.message; } catch (e) { /* text body */ }
    throw new ApiError(r.status, msg, path);
  }
  return r;
}

async function connect(method, body) {
  const r = await api('/querier.v1.QuerierService/' + method, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  return r.json();
}

function showError(e) {
  const el = $('error');
  if (!e) { el.hidden = true; el.textContent = ''; return; }
  console.error(e);
  const where = e.path ? e.path.split('?')[0] + ': ' : '';
  const status = e.status ? 'HTTP ' + e.status + ': ' : '';
  el.textContent = (el.hidden ? '' : el.textContent + '\n') + where + status + e.message;
  el.hidden = false;
}

/* ----------------------------------------------------------------- time */

const UNIT_MS = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3, w: 604800e3 };

/* A time as the user or the URL wrote it -> unix ms (now = `now`). */
function toMs(s, now) {
  s = (s || '').trim();
  if (s === '' || s === 'now') return now;
  const m = /^now-(\d+)([smhdw])$/.exec(s);
  if (m) return now - Number(m[1]) * UNIT_MS[m[2]];
  if (/^\d+$/.test(s)) { const n = Number(s); return n < 1e11 ? n * 1000 : n; }
  const d = Date.parse(s);
  if (!isNaN(d)) return d;
  throw new ApiError(0, 'cannot read the time "' + s + '" (now-1h, a unix time or 2026-01-02T15:04)', '');
}

function range(from, until) {
  const now = Date.now();
  const a = toMs(from, now), b = toMs(until, now);
  if (!(a < b)) throw new ApiError(0, '"from" must be before "until"', '');
  return [a, b];
}

function fmtDate(ms) {
  const d = new Date(ms), p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/* ---------------------------------------------------------------- units */

function unitKind(typeId) {
  const u = (typeId || '').split(':')[2] || '';
  if (u === 'nanoseconds') return 'ns';
  if (u === 'bytes') return 'bytes';
  return 'count';
}

function fmtNum(v, digits = 3) {
  return Number(v.toPrecision(digits)).toLocaleString('en-US');
}

function fmtValue(v, kind) {
  const a = Math.abs(v);
  if (kind === 'ns') {
    if (a < 1e3) return fmtNum(v) + ' ns';
    if (a < 1e6) return fmtNum(v / 1e3) + ' µs';
    if (a < 1e9) return fmtNum(v / 1e6) + ' ms';
    if (a < 60e9) return fmtNum(v / 1e9) + ' s';
    if (a < 3600e9) return fmtNum(v / 60e9) + ' min';
    return fmtNum(v / 3600e9) + ' h';
  }
  if (kind === 'bytes') {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0, x = v;
    while (Math.abs(x) >= 1024 && i < u.length - 1) { x /= 1024; i++; }
    return fmtNum(x) + ' ' + u[i];
  }
  if (a < 1e3) return String(Math.round(v * 100) / 100);
  if (a < 1e6) return fmtNum(v / 1e3) + 'k';
  if (a < 1e9) return fmtNum(v / 1e6) + 'M';
  return fmtNum(v / 1e9) + 'G';
}

const pct = (a, b) => (b > 0 ? (100 * a / b).toFixed(2) : '0.00') + '%';

/* ------------------------------------------------------ flamegraph data */

/*
 * A flamegraph is columnar: node i has x, total, self (in ticks), depth,
 * parent and name (index into names); nodes are ordered by depth, then x,
 * and level d is nodes [lv[d], lv[d+1]).  A comparison also has l/ls (left
 * total/self) and r/rs (right), with total = l + r as Pyroscope draws it.
 */
function makeFlame(n, diff) {
  const f = {
    n, names: [], x: new Float64Array(n), total: new Float64Array(n), self: new Float64Array(n),
    depth: new Int32Array(n), parent: new Int32Array(n), name: new Int32Array(n), lv: [0],
    diff: null, unit: 'count', raw: null,
  };
  if (diff) f.diff = { l: new Float64Array(n), ls: new Float64Array(n), r: new Float64Array(n), rs: new Float64Array(n), leftTicks: 0, rightTicks: 0 };
  return f;
}

/* flamebearer JSON (single or double, docs/wire-formats.md §3) -> flame. */
function decodeFlamebearer(fb, meta, extra) {
  const double = meta && meta.format === 'double';
  const stride = double ? 7 : 4;
  let n = 0;
  for (const row of fb.levels) n += row.length / stride;
  const f = makeFlame(n, double);
  f.names = fb.names;
  let k = 0;
  for (let d = 0; d < fb.levels.length; d++) {
    const row = fb.levels[d];
    let end = 0, endL = 0, endR = 0;
    for (let i = 0; i < row.length; i += stride, k++) {
      f.depth[k] = d;
      if (double) {
        const xl = endL + Number(row[i]), tl = Number(row[i + 1]), sl = Number(row[i + 2]);
        const xr = endR + Number(row[i + 3]), tr = Number(row[i + 4]), sr = Number(row[i + 5]);
        endL = xl + tl; endR = xr + tr;
        f.x[k] = xl + xr; f.total[k] = tl + tr; f.self[k] = sl + sr; f.name[k] = Number(row[i + 6]);
        f.diff.l[k] = tl; f.diff.ls[k] = sl; f.diff.r[k] = tr; f.diff.rs[k] = sr;
      } else {
        const x = end + Number(row[i]), t = Number(row[i + 1]);
        end = x + t;
        f.x[k] = x; f.total[k] = t; f.self[k] = Number(row[i + 2]); f.name[k] = Number(row[i + 3]);
      }
    }
    f.lv.push(k);
  }
  linkParents(f);
  if (double) {
    f.diff.leftTicks = Number(extra && extra.leftTicks) || (n ? f.diff.l[0] : 0);
    f.diff.rightTicks = Number(extra && extra.rightTicks) || (n ? f.diff.r[0] : 0);
  }
  return f;
}

/* Each node's parent: the node of the row above whose span holds its x. */
function linkParents(f) {
  f.parent.fill(-1);
  for (let d = 1; d < f.lv.length - 1; d++) {
    let j = f.lv[d - 1];
    const jEnd = f.lv[d];
    for (let i = f.lv[d]; i < f.lv[d + 1]; i++) {
      while (j < jEnd - 1 && f.x[j] + f.total[j] <= f.x[i] && !(f.total[i] === 0 && f.x[j] + f.total[j] === f.x[i])) j++;
      f.parent[i] = j;
    }
  }
}

/* Children of node i are nodes [cs[i], ce[i]) (consecutive in their row). */
function childRanges(f) {
  if (f.cs) return f;
  f.cs = new Int32Array(f.n); f.ce = new Int32Array(f.n);
  for (let i = f.n - 1; i > 0; i--) {
    const p = f.parent[i];
    if (p < 0) continue;
    if (f.ce[p] === 0) f.ce[p] = i + 1;
    f.cs[p] = i;
  }
  return f;
}

/* Trie nodes: {name, total, self, kids: Map} or, for a diff, l/ls/r/rs. */
function trieNode(name) { return { name, total: 0, self: 0, l: 0, ls: 0, r: 0, rs: 0, kids: new Map() }; }

function trieChild(t, name) {
  let c = t.kids.get(name);
  if (!c) { c = trieNode(name); t.kids.set(name, c); }
  return c;
}

function flameToTrie(f) {
  const nodes = new Array(f.n);
  for (let i = 0; i < f.n; i++) {
    const t = trieNode(f.names[f.name[i]]);
    t.total = f.total[i]; t.self = f.self[i];
    nodes[i] = t;
    if (f.parent[i] >= 0) nodes[f.parent[i]].kids.set(t.name + '\u0000' + i, t);
  }
  /* Re-key children by name, merging duplicates (there are none from /render). */
  const root = f.n ? nodes[0] : trieNode('total');
  const rekey = (t) => {
    const m = new Map();
    for (const c of t.kids.values()) {
      const o = m.get(c.name);
      if (o) { mergeInto(o, c); } else m.set(c.name, c);
    }
    t.kids = m;
    for (const c of m.values()) rekey(c);
  };
  rekey(root);
  return root;
}

function mergeInto(a, b) {
  a.total += b.total; a.self += b.self;
  for (const [k, c] of b.kids) {
    const o = a.kids.get(k);
    if (o) mergeInto(o, c); else a.kids.set(k, c);
  }
}

/* Lay a trie out as a flame: children by name, after the parent's self. */
function trieToFlame(root, diff, unit) {
  let n = 0;
  const count = (t) => { n++; for (const c of t.kids.values()) count(c); };
  count(root);
  const f = makeFlame(n, diff);
  f.unit = unit;
  const names = new Map();
  const nameIdx = (s) => { let i = names.get(s); if (i === undefined) { i = f.names.length; names.set(s, i); f.names.push(s); } return i; };
  let level = [{ t: root, x: 0, p: -1 }], k = 0, d = 0;
  while (level.length) {
    const next = [];
    for (const { t, x, p } of level) {
      f.x[k] = x; f.depth[k] = d; f.parent[k] = p; f.name[k] = nameIdx(t.name);
      if (diff) {
        f.diff.l[k] = t.l; f.diff.ls[k] = t.ls; f.diff.r[k] = t.r; f.diff.rs[k] = t.rs;
        f.total[k] = t.l + t.r; f.self[k] = t.ls + t.rs;
      } else { f.total[k] = t.total; f.self[k] = t.self; }
      let cx = x + f.self[k];
      const kids = [...t.kids.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      for (const c of kids) {
        next.push({ t: c, x: cx, p: k });
        cx += diff ? c.l + c.r : c.total;
      }
      k++;
    }
    f.lv.push(k);
    level = next; d++;
  }
  if (diff) { f.diff.leftTicks = root.l; f.diff.rightTicks = root.r; }
  return f;
}

/* Two single trees -> one double tree (what /render-diff computes). */
function diffTries(left, right) {
  const walk = (dst, t, side) => {
    if (side === 'l') { dst.l += t.total; dst.ls += t.self; } else { dst.r += t.total; dst.rs += t.self; }
    for (const c of t.kids.values()) walk(trieChild(dst, c.name), c, side);
  };
  const root = trieNode('total');
  walk(root, left, 'l');
  walk(root, right, 'r');
  return root;
}

/* flame -> flamebearer JSON (export, and a faithful round trip). */
function toFlamebearer(f) {
  const levels = [];
  const dbl = !!f.diff;
  for (let d = 0; d + 1 < f.lv.length; d++) {
    const row = [];
    let end = 0;
    for (let i = f.lv[d]; i < f.lv[d + 1]; i++) {
      if (dbl) {
        /* Rebuild each side's x from the parent: children follow self. */
        row.push(0, f.diff.l[i], f.diff.ls[i], 0, f.diff.r[i], f.diff.rs[i], f.name[i]);
      } else {
        row.push(f.x[i] - end, f.total[i], f.self[i], f.name[i]);
        end = f.x[i] + f.total[i];
      }
    }
    if (dbl) encodeDoubleX(f, d, row);
    levels.push(row);
  }
  let maxSelf = 0;
  for (let i = 0; i < f.n; i++) maxSelf = Math.max(maxSelf, f.self[i]);
  const fb = { names: f.names, levels, numTicks: f.n ? f.total[0] : 0, maxSelf };
  const out = { version: 1, flamebearer: fb, metadata: { format: dbl ? 'double' : 'single', units: f.unit, name: f.title || '' } };
  if (dbl) { out.leftTicks = f.diff.leftTicks; out.rightTicks = f.diff.rightTicks; }
  return out;
}

function encodeDoubleX(f, d, row) {
  /* Absolute left/right x of every node of row d, from its parent's. */
  const xl = f.diff.xl || (f.diff.xl = new Float64Array(f.n));
  const xr = f.diff.xr || (f.diff.xr = new Float64Array(f.n));
  const nextL = new Map(), nextR = new Map();
  let endL = 0, endR = 0, j = 0;
  for (let i = f.lv[d]; i < f.lv[d + 1]; i++, j += 7) {
    const p = f.parent[i];
    if (p < 0) { xl[i] = 0; xr[i] = 0; } else {
      xl[i] = nextL.has(p) ? nextL.get(p) : xl[p] + f.diff.ls[p];
      xr[i] = nextR.has(p) ? nextR.get(p) : xr[p] + f.diff.rs[p];
    }
    nextL.set(p, xl[i] + f.diff.l[i]); nextR.set(p, xr[i] + f.diff.r[i]);
    row[j] = xl[i] - endL; row[j + 3] = xr[i] - endR;
    endL = xl[i] + f.diff.l[i]; endR = xr[i] + f.diff.r[i];
  }
}

function toCollapsed(f) {
  const lines = [];
  const path = (i) => { const p = []; for (; i > 0; i = f.parent[i]) p.push(f.names[f.name[i]]); return p.reverse().join(';'); };
  for (let i = 1; i < f.n; i++) {
    const s = f.diff ? f.diff.rs[i] : f.self[i];
    if (s > 0) lines.push(path(i) + ' ' + s);
  }
  return lines.join('\n') + '\n';
}

/* ---------------------------------------------------------------- colour */

const PALETTE = ['#f0a03c', '#e8773a', '#d9583b', '#f5c542', '#c9a227', '#e5935f', '#d4724a',
  '#7fb069', '#5ba199', '#8fb8de', '#6c8ebf', '#b58db6', '#c97b84', '#a3a948', '#e0b07a', '#9c89b8'];

function pkgOf(name) {
  if (name === 'total' || name === 'other') return name;
  let s = name;
  const sp = s.indexOf(' ');
  if (sp > 0 && s.indexOf('(') > sp) s = s.slice(sp + 1);
  const cc = s.indexOf('::');
  if (cc > 0) return s.slice(0, cc);
  const slash = s.lastIndexOf('/');
  const dot = s.indexOf('.', slash + 1);
  if (slash >= 0) return dot > 0 ? s.slice(0, dot) : s.slice(0, slash);
  const parts = s.split('.');
  if (parts.length > 3) return parts.slice(0, parts.length - 2).join('.');
  if (parts.length > 1) return parts[0];
  const colon = s.indexOf(':');
  return colon > 0 ? s.slice(0, colon) : s;
}

function hashStr(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
  return h >>> 0;
}

function pkgColour(name) {
  const p = pkgOf(name);
  if (p === 'total') return '#b8bec8';
  if (p === 'other') return '#d0d3d9';
  return PALETTE[hashStr(p) % PALETTE.length];
}

/* Relative change of a frame's share: -1..+inf; colour red = grew. */
function diffColour(lshare, rshare) {
  if (lshare === 0 && rshare === 0) return '#d6d6d6';
  if (lshare === 0) return 'rgb(220,38,38)';
  if (rshare === 0) return 'rgb(22,163,74)';
  const rel = (rshare - lshare) / lshare;
  const a = Math.min(1, Math.abs(rel));
  const base = [214, 214, 214];
  const to = rel > 0 ? [220, 38, 38] : [22, 163, 74];
  const c = base.map((b, i) => Math.round(b + (to[i] - b) * a));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// A swatch: a span of the given background colour (set through the
// CSSOM, so the Content-Security-Policy needs no inline styles).
function swatch(tag, colour, text) {
  const e = document.createElement(tag);
  e.style.background = colour;
  if (text) e.textContent = text;
  return e;
}

function diffLegend(el) {
  const steps = [-1, -0.5, -0.2, -0.05, 0, 0.05, 0.2, 0.5, 1];
  el.appendChild(document.createTextNode('Colour: change of share, right vs left '));
  for (const r of steps)
    el.appendChild(swatch('span', diffColour(1, 1 + r), (r > 0 ? '+' : '') + Math.round(r * 100) + '%'));
  el.appendChild(document.createTextNode(' '));
  el.appendChild(swatch('span', 'rgb(220,38,38)', 'new'));
  el.appendChild(swatch('span', 'rgb(22,163,74)', 'gone'));
}

/* -------------------------------------------------------- flame renderer */

class FlameView {
  constructor(canvas, opts = {}) {
    this.c = canvas;
    this.opts = opts;
    this.f = null;
    this.focus = 0;
    this.search = '';
    this.rootAtTop = true;
    this.lastDrawMs = 0;
    canvas.addEventListener('mousemove', (e) => this.hover(e));
    canvas.addEventListener('mouseleave', () => { $('tooltip').hidden = true; });
    canvas.addEventListener('click', (e) => {
      const i = this.hit(e);
      if (i >= 0 && this.opts.onFocus) this.opts.onFocus(i, this);
    });
  }

  setData(f) { this.f = f; this.focus = 0; this.match = null; }

  /* The path of node i as names below the root, joined by ';' (URL form). */
  pathOf(i) {
    const f = this.f, p = [];
    for (; i > 0; i = f.parent[i]) p.push(f.names[f.name[i]]);
    return p.reverse().join(';');
  }

  /* Node at a URL path, or 0 (the root) when it is no longer there. */
  nodeAt(path) {
    const f = this.f;
    if (!f || !path) return 0;
    let cur = 0;
    for (const name of path.split(';')) {
      const d = f.depth[cur] + 1;
      if (d + 1 >= f.lv.length) return 0;
      let found = -1;
      for (let i = f.lv[d]; i < f.lv[d + 1]; i++) {
        if (f.parent[i] === cur && f.names[f.name[i]] === name) { found = i; break; }
      }
      if (found < 0) return 0;
      cur = found;
    }
    return cur;
  }

  computeMatches() {
    const f = this.f;
    this.match = null;
    this.matchTotal = 0;
    this.matchCount = 0;
    if (!f || !this.search) return;
    const q = this.search.toLowerCase();
    const nm = f.names.map((s) => s.toLowerCase().includes(q));
    const m = new Uint8Array(f.n);
    for (let i = 0; i < f.n; i++) {
      if (!nm[f.name[i]]) continue;
      m[i] = 1;
      this.matchCount++;
      let a = f.parent[i];
      while (a >= 0 && !m[a]) a = f.parent[a];
      if (a < 0) this.matchTotal += f.total[i];
    }
    this.match = m;
  }

  draw() {
    const t0 = performance.now();
    const f = this.f, c = this.c;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth || 800;
    const depth = f ? Math.min(f.lv.length - 1, 1200) : 0;
    const h = Math.max(ROW, depth * ROW);
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr); c.style.height = h + 'px';
    }
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    this.w = w; this.h = h; this.depthShown = depth;
    if (!f || f.n === 0) {
      g.fillStyle = '#6b7280'; g.font = '13px system-ui, sans-serif';
      g.fillText('No profiles in this range.', 8, 13);
      this.lastDrawMs = performance.now() - t0;
      return;
    }
    const fo = this.focus;
    const x0 = f.x[fo], span = f.total[fo] || 1, fd = f.depth[fo];
    const k = w / span;
    g.font = '12px system-ui, sans-serif';
    g.textBaseline = 'middle';
    if (!this.charW) this.charW = g.measureText('abcdefghijklmnopqrstuvwxyz').width / 26;
    const cw = this.charW;
    const lt = f.diff ? f.diff.leftTicks || 1 : 0, rt = f.diff ? f.diff.rightTicks || 1 : 0;
    const anc = new Set();
    for (let a = fo; a >= 0; a = f.parent[a]) anc.add(a);
    for (let d = 0; d < depth; d++) {
      const y = this.rootAtTop ? d * ROW : h - (d + 1) * ROW;
      let lo = f.lv[d], hi = f.lv[d + 1];
      if (d < fd) {
        /* Rows above the focus: only its ancestors, full width. */
        for (let i = lo; i < hi; i++) if (anc.has(i)) this.box(g, f, i, 0, w, y, cw, lt, rt, true);
        continue;
      }
      /* Binary search the first node that ends after the window start. */
      while (lo < hi) { const mid = (lo + hi) >> 1; if (f.x[mid] + f.total[mid] <= x0) lo = mid + 1; else hi = mid; }
      const xEnd = x0 + span;
      for (let i = lo; i < f.lv[d + 1] && f.x[i] < xEnd; i++) {
        const bw = f.total[i] * k;
        if (bw < 0.5) continue;
        this.box(g, f, i, (f.x[i] - x0) * k, bw, y, cw, lt, rt, false);
      }
    }
    this.lastDrawMs = performance.now() - t0;
  }

  box(g, f, i, x, bw, y, cw, lt, rt, ancestor) {
    const name = f.names[f.name[i]];
    let col;
    if (f.diff) col = diffColour(f.diff.l[i] / lt, f.diff.r[i] / rt);
    else col = pkgColour(name);
    if (this.match && !this.match[i]) col = '#e9eaec';
    g.fillStyle = col;
    g.globalAlpha = ancestor && this.focus !== i ? 0.55 : 1;
    g.fillRect(x, y, Math.max(bw - (bw > 2 ? 0.5 : 0), 0.5), ROW - 1);
    g.globalAlpha = 1;
    if (bw > 28) {
      const max = Math.floor((bw - 6) / cw);
      const label = name.length > max ? name.slice(0, Math.max(max - 1, 1)) + '…' : name;
      g.fillStyle = '#1d2330';
      g.fillText(label, x + 3, y + ROW / 2);
    }
  }

  /* Node under the mouse, or -1. */
  hit(e) {
    const f = this.f;
    if (!f || !f.n) return -1;
    const r = this.c.getBoundingClientRect();
    const mx = e.clientX - r.left, my = e.clientY - r.top;
    const d = this.rootAtTop ? Math.floor(my / ROW) : Math.floor((this.h - my) / ROW);
    if (d < 0 || d >= this.depthShown) return -1;
    const fo = this.focus, fd = f.depth[fo];
    if (d < fd) { let a = fo; while (f.depth[a] > d) a = f.parent[a]; return a; }
    const tx = f.x[fo] + mx / this.w * (f.total[fo] || 1);
    let lo = f.lv[d], hi = f.lv[d + 1];
    while (lo < hi) { const mid = (lo + hi) >> 1; if (f.x[mid] + f.total[mid] <= tx) lo = mid + 1; else hi = mid; }
    if (lo < f.lv[d + 1] && f.x[lo] <= tx && tx < f.x[lo] + f.total[lo] && f.x[lo] >= f.x[fo] && f.x[lo] < f.x[fo] + f.total[fo]) return lo;
    return -1;
  }

  hover(e) {
    const tip = $('tooltip');
    const i = this.hit(e);
    if (i < 0) { tip.hidden = true; return; }
    const f = this.f, kind = f.unit, root = f.total[0];
    const name = f.names[f.name[i]];
    let rows;
    if (f.diff) {
      const lt = f.diff.leftTicks, rt = f.diff.rightTicks;
      const ls = lt ? f.diff.l[i] / lt : 0, rs = rt ? f.diff.r[i] / rt : 0;
      const ch = ls ? ((rs - ls) / ls * 100).toFixed(1) + '%' : (rs ? 'new' : '-');
      rows = [['Left total', `${fmtValue(f.diff.l[i], kind)} (${pct(f.diff.l[i], lt)})`],
        ['Right total', `${fmtValue(f.diff.r[i], kind)} (${pct(f.diff.r[i], rt)})`],
        ['Left self', fmtValue(f.diff.ls[i], kind)], ['Right self', fmtValue(f.diff.rs[i], kind)],
        ['Change', (rs > ls && ls ? '+' : '') + ch]];
    } else {
      rows = [['Total', `${fmtValue(f.total[i], kind)} (${pct(f.total[i], root)})`],
        ['Self', `${fmtValue(f.self[i], kind)} (${pct(f.self[i], root)})`]];
    }
    tip.innerHTML = '<b></b><table>' + rows.map((r) => `<tr><td>${r[0]}</td><td>${r[1]}</td></tr>`).join('') + '</table><small>click to focus</small>';
    tip.firstChild.textContent = name;
    tip.hidden = false;
    const x = Math.min(e.clientX + 12, window.innerWidth - tip.offsetWidth - 4);
    const y = Math.min(e.clientY + 14, window.innerHeight - tip.offsetHeight - 4);
    tip.style.left = x + 'px'; tip.style.top = y + 'px';
  }
}

/* --------------------------------------------------------------- table */

function aggregate(f) {
  const byName = new Map();
  for (let i = 1; i < f.n; i++) {
    const nm = f.name[i];
    let e = byName.get(nm);
    if (!e) { e = { name: f.names[nm], self: 0, total: 0 }; byName.set(nm, e); }
    e.self += f.diff ? f.diff.rs[i] : f.self[i];
    let a = f.parent[i], rec = false;
    for (; a > 0; a = f.parent[a]) if (f.name[a] === nm) { rec = true; break; }
    if (!rec) e.total += f.diff ? f.diff.r[i] : f.total[i];
  }
  return [...byName.values()];
}

function renderTable() {
  const f = cur.flame;
  const tb = $('table').tBodies[0];
  tb.textContent = '';
  if (!f) return;
  const [key, dir] = S.sort.split(':');
  for (const th of $('table').tHead.rows[0].cells) th.className = th.dataset.k === key ? dir : '';
  const q = $('tableFilter').value.toLowerCase();
  let rows = (cur.agg || (cur.agg = aggregate(f))).filter((r) => !q || r.name.toLowerCase().includes(q));
  const sgn = dir === 'asc' ? 1 : -1;
  rows.sort((a, b) => (key === 'name' ? (a.name < b.name ? -1 : a.name > b.name ? 1 : 0) : a[key] - b[key]) * sgn);
  rows = rows.slice(0, 2000);
  const root = f.diff ? f.diff.rightTicks : f.total[0];
  const frag = document.createDocumentFragment();
  for (const r of rows) {
    const tr = document.createElement('tr');
    const td = document.createElement('td');
    td.textContent = r.name; td.title = r.name;
    tr.appendChild(td);
    for (const k of ['self', 'total']) {
      const c = document.createElement('td');
      const bar = document.createElement('span');
      bar.className = 'bar';
      bar.style.width = Math.round(40 * r[k] / (root || 1)) + 'px';
      c.appendChild(bar);
      c.appendChild(document.createTextNode(`${fmtValue(r[k], f.unit)} (${pct(r[k], root)})`));
      tr.appendChild(c);
    }
    tr.onclick = () => { S.sandwich = r.name; S.view = 'sandwich'; writeURL(true); showView(); };
    frag.appendChild(tr);
  }
  tb.appendChild(frag);
}

/* ------------------------------------------------------------- sandwich */

function sandwichFlames(f, fn) {
  childRanges(f);
  const callers = trieNode(fn), callees = trieNode(fn);
  for (let i = 1; i < f.n; i++) {
    if (f.names[f.name[i]] !== fn) continue;
    let a = f.parent[i], rec = false;
    for (; a > 0; a = f.parent[a]) if (f.names[f.name[a]] === fn) { rec = true; break; }
    if (rec) continue;
    /* Callees: the subtree under i, merged. */
    const add = (dst, j) => {
      dst.total += f.total[j]; dst.self += f.self[j];
      for (let c = f.cs[j]; c < f.ce[j]; c++) add(trieChild(dst, f.names[f.name[c]]), c);
    };
    add(callees, i);
    /* Callers: the path up to the root, the function first. */
    callers.total += f.total[i];
    let t = callers;
    for (a = f.parent[i]; a > 0; a = f.parent[a]) {
      t = trieChild(t, f.names[f.name[a]]);
      t.total += f.total[i];
    }
    t.self += f.total[i];
  }
  return { callers: trieToFlame(callers, false, f.unit), callees: trieToFlame(callees, false, f.unit) };
}

/* ------------------------------------------------------------ timeline */

const TL = { series: [], start: 0, end: 0, step: 0, drag: null, fn: null };
const SERIES_COLOURS = ['#f0a03c', '#6c8ebf', '#7fb069', '#d9583b', '#b58db6', '#5ba199', '#c9a227', '#c97b84'];

function drawTimeline() {
  const c = $('timeline'), dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth || 800, h = 110;
  c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
  const g = c.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const { series, start, end, step } = TL;
  if (!(end > start)) return;
  const span = end - start, plotH = h - 16;
  /* Stack: sum per bucket. */
  const buckets = new Map();
  for (const s of series) for (const p of s.points) {
    const t = Number(p.timestamp);
    buckets.set(t, (buckets.get(t) || 0) + Number(p.value));
  }
  const max = Math.max(1, ...buckets.values());
  const bw = Math.max(1, w * step / span - 1);
  const base = new Map();
  series.forEach((s, si) => {
    g.fillStyle = SERIES_COLOURS[si % SERIES_COLOURS.length];
    for (const p of s.points) {
      const t = Number(p.timestamp), v = Number(p.value);
      const b = base.get(t) || 0;
      const x = (t - start) / span * w, y0 = plotH - b / max * plotH, bh = v / max * plotH;
      g.fillRect(x, y0 - bh, bw, bh);
      base.set(t, b + v);
    }
  });
  g.fillStyle = '#6b7280'; g.font = '11px system-ui, sans-serif'; g.textBaseline = 'alphabetic';
  g.fillText(fmtDate(start), 2, h - 3);
  const e = fmtDate(end);
  g.fillText(e, w - g.measureText(e).width - 2, h - 3);
  g.fillText('max ' + fmtValue(max, cur.unit), 2, 10);
  if (TL.fn && TL.fn.step > 0) {
    /* The function's line, per the bars' step (its own step may differ). */
    const k = step / TL.fn.step;
    g.strokeStyle = '#111'; g.lineWidth = 1.5;
    g.beginPath();
    TL.fn.samples.forEach((v, i) => {
      const x = (TL.fn.start + i * TL.fn.step - start) / span * w + bw / 2;
      const y = plotH - Math.max(0, v * k) / max * plotH;
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
  }
  if (TL.drag && TL.drag.x1 !== undefined) {
    g.fillStyle = 'rgba(47,111,222,0.2)';
    const a = Math.min(TL.drag.x0, TL.drag.x1), b = Math.max(TL.drag.x0, TL.drag.x1);
    g.fillRect(a, 0, b - a, plotH);
  }
}

function timelineEvents() {
  const c = $('timeline');
  const pos = (e) => Math.max(0, Math.min(c.clientWidth, e.clientX - c.getBoundingClientRect().left));
  c.addEventListener('mousedown', (e) => { TL.drag = { x0: pos(e) }; });
  window.addEventListener('mousemove', (e) => { if (TL.drag) { TL.drag.x1 = pos(e); drawTimeline(); } });
  window.addEventListener('mouseup', () => {
    const d = TL.drag;
    TL.drag = null;
    if (!d || d.x1 === undefined || Math.abs(d.x1 - d.x0) < 4) { drawTimeline(); return; }
    const w = c.clientWidth, span = TL.end - TL.start;
    const a = TL.start + Math.min(d.x0, d.x1) / w * span, b = TL.start + Math.max(d.x0, d.x1) / w * span;
    S.from = String(Math.floor(a / 1000)); S.until = String(Math.ceil(b / 1000));
    S.focus = '';
    writeURL(true);
    loadView();
  });
}

/* ------------------------------------------------------------ loading */

const cur = { flame: null, raw: null, unit: 'count', agg: null, adhoc: null };
const main = new FlameView($('flame'), { onFocus: (i, v) => focusNode(i, v) });
const second = new FlameView($('flame2'), { onFocus: (i, v) => focusNode(i, v) });
const left = new FlameView($('flameL'), {});
const right = new FlameView($('flameR'), {});
const esc = (s) => s.replace(/\\/g, '\\\\').replace(/"/g, '\\"');

function selector(extra) {
  const parts = [];
  if (S.service) parts.push(`service_name="${esc(S.service)}"`);
  const more = (extra === undefined ? S.filters : extra).trim();
  if (more) parts.push(more);
  return '{' + parts.join(',') + '}';
}

function focusNode(i, v) {
  if (v !== main || S.view === 'sandwich') { v.focus = i; v.draw(); return; }
  main.focus = i;
  S.focus = main.pathOf(i);
  writeURL(true);
  main.draw();
}

let loadSeq = 0;

async function loadServices() {
  const [a, b] = range(S.from, S.until);
  const r = await connect('LabelValues', { name: 'service_name', start: a, end: b });
  const svcs = r.names || [];
  if (S.service && !svcs.includes(S.service)) svcs.unshift(S.service);
  fillSelect($('service'), svcs, S.service);
  if (!S.service && svcs.length) S.service = svcs[0];
  const pt = await connect('ProfileTypes', { start: a, end: b });
  let types = (pt.profileTypes || []).map((t) => t.ID);
  if (S.service) {
    /* Only the types this service has, when the server can tell. */
    try {
      const v = await connect('LabelValues', { name: '__profile_type__', matchers: [selector('')], start: a, end: b });
      if (v.names && v.names.length) types = types.filter((t) => v.names.includes(t));
    } catch (e) { /* keep every type */ }
  }
  if (S.type && !types.includes(S.type)) types.unshift(S.type);
  if (!S.type || !types.includes(S.type)) S.type = types[0] || '';
  fillSelect($('ptype'), types, S.type);
  cur.unit = unitKind(S.type);
}

function fillSelect(sel, values, chosen) {
  sel.textContent = '';
  for (const v of values) {
    const o = document.createElement('option');
    o.value = v; o.textContent = v;
    if (v === chosen) o.selected = true;
    sel.appendChild(o);
  }
}

async function loadTimeline(seq) {
  const [a, b] = range(S.from, S.until);
  const step = Math.max(10, Math.round((b - a) / 1000 / 240));
  const req = { profileTypeID: S.type, labelSelector: selector(), start: a, end: b, step };
  if (S.groupBy) req.groupBy = [S.groupBy];
  const r = await connect('SelectSeries', req);
  if (seq !== loadSeq) return;
  Object.assign(TL, { series: r.series || [], start: a, end: b, step: step * 1000 });
  drawTimeline();
  const legend = $('tlLegend');
  legend.textContent = '';
  if (S.fn && S.view === 'diff') loadFunctionTimeline().catch(showError); else TL.fn = null;
  const tags = $('tags');
  tags.textContent = '';
  if (S.groupBy) {
    const sums = TL.series.map((s, i) => ({
      i, value: ((s.labels || []).find((l) => l.name === S.groupBy) || {}).value || '(none)',
      sum: s.points.reduce((t, p) => t + Number(p.value), 0),
    }));
    const all = sums.reduce((t, s) => t + s.sum, 0);
    for (const s of sums) {
      const item = document.createElement('span');
      item.appendChild(swatch('b', SERIES_COLOURS[s.i % SERIES_COLOURS.length]));
      item.appendChild(document.createTextNode(s.value));
      legend.appendChild(item);
    }
    sums.sort((x, y) => y.sum - x.sum);
    for (const s of sums) {
      const t = document.createElement('span');
      t.className = 'tag';
      t.title = 'Filter on ' + S.groupBy + '="' + s.value + '"';
      t.textContent = s.value + ' ';
      t.insertAdjacentHTML('beforeend', `<i>${pct(s.sum, all)}</i>`);
      t.onclick = () => addFilter(`${S.groupBy}="${esc(s.value)}"`);
      tags.appendChild(t);
    }
  }
}

async function loadLabelNames() {
  const [a, b] = range(S.from, S.until);
  const r = await connect('LabelNames', { matchers: [selector('')], start: a, end: b });
  const names = (r.names || []).filter((n) => !n.startsWith('__') && n !== 'service_name');
  if (S.groupBy && !names.includes(S.groupBy)) names.unshift(S.groupBy);
  fillSelect($('groupBy'), [''].concat(names), S.groupBy);
  $('groupBy').options[0].textContent = '(none)';
}

async function loadFlame(seq) {
  const [a, b] = range(S.from, S.until);
  const q = new URLSearchParams({ query: S.type + selector(), from: Math.floor(a / 1000), until: Math.ceil(b / 1000) });
  const r = await api('/render?' + q);
  const j = await r.json();
  if (seq !== loadSeq) return;
  const f = decodeFlamebearer(j.flamebearer, j.metadata);
  f.unit = cur.unit;
  f.title = S.service + ' ' + S.type;
  setFlame(f, j);
}

function setFlame(f, raw) {
  cur.flame = f; cur.raw = raw; cur.agg = null;
  main.setData(f);
  main.focus = main.nodeAt(S.focus);
  main.rootAtTop = S.icicle === '1';
  main.search = S.search;
  main.computeMatches();
  showView();
}

async function loadDiff(seq) {
  const [a, b] = range(S.from, S.until);
  const mid = Math.floor((a + b) / 2000);
  const lf = S.lfrom || String(Math.floor(a / 1000)), lu = S.luntil || String(mid);
  const rf = S.rfrom || String(mid), ru = S.runtil || String(Math.ceil(b / 1000));
  const ls = S.lsel || S.filters, rs = S.rsel || S.filters;
  $('lfrom').value = lf; $('luntil').value = lu; $('rfrom').value = rf; $('runtil').value = ru;
  $('lsel').value = ls; $('rsel').value = rs;
  const now = Date.now();
  const sec = (s, up) => String(up ? Math.ceil(toMs(s, now) / 1000) : Math.floor(toMs(s, now) / 1000));
  const lq = S.type + selector(ls), rq = S.type + selector(rs);
  const params = new URLSearchParams({ leftQuery: lq, leftFrom: sec(lf), leftUntil: sec(lu, 1), rightQuery: rq, rightFrom: sec(rf), rightUntil: sec(ru, 1) });
  let f = null, raw = null;
  try {
    raw = await (await api('/render-diff?' + params)).json();
    f = decodeFlamebearer(raw.flamebearer, raw.metadata, raw);
  } catch (e) {
    if (!(e instanceof ApiError) || (e.status !== 404 && e.status !== 405)) throw e;
  }
  const one = async (q, fr, un) => {
    const r = await api('/render?' + new URLSearchParams({ query: q, from: fr, until: un }));
    const j = await r.json();
    const x = decodeFlamebearer(j.flamebearer, j.metadata);
    x.unit = cur.unit;
    return x;
  };
  const changes = api('/api/top-changes?' + params + '&limit=15').then((r) => r.json()).catch((e) => {
    if (e instanceof ApiError && (e.status === 404 || e.status === 405)) return null;
    throw e;
  });
  const [L, R, tc] = await Promise.all([one(lq, sec(lf), sec(lu, 1)), one(rq, sec(rf), sec(ru, 1)), changes]);
  if (seq !== loadSeq) return;
  renderChanges(tc);
  if (!f) {
    /* No /render-diff behind this URL: the same double tree, computed here. */
    f = trieToFlame(diffTries(flameToTrie(L), flameToTrie(R)), true, cur.unit);
    raw = toFlamebearer(f);
  }
  f.unit = cur.unit;
  f.title = 'diff ' + lq + ' vs ' + rq;
  left.setData(L); right.setData(R);
  $('capL').textContent = `Left: ${fmtValue(L.n ? L.total[0] : 0, cur.unit)} (${fmtDate(toMs(lf, now))} – ${fmtDate(toMs(lu, now))})`;
  $('capR').textContent = `Right: ${fmtValue(R.n ? R.total[0] : 0, cur.unit)} (${fmtDate(toMs(rf, now))} – ${fmtDate(toMs(ru, now))})`;
  setFlame(f, raw);
}

function renderChanges(j) {
  const tb = $('changes').tBodies[0];
  tb.textContent = '';
  $('changesBox').dataset.none = j ? '' : '1';
  $('changesBox').hidden = S.view !== 'diff' || !j;
  if (!j) return;
  const pp = (x) => (x * 100).toFixed(1) + '%';
  for (const f of j.functions || []) {
    const tr = document.createElement('tr');
    const ch = f.totalChange;
    const cells = [f.name, pp(f.left.totalShare), pp(f.right.totalShare), (ch > 0 ? '+' : '') + (ch * 100).toFixed(1) + ' pp'];
    cells.forEach((t, k) => {
      const td = document.createElement('td');
      td.textContent = t;
      if (k === 0) td.title = t;
      if (k === 3) td.className = ch > 0 ? 'up' : ch < 0 ? 'down' : '';
      tr.appendChild(td);
    });
    tr.classList.toggle('on', f.name === S.fn);
    tr.onclick = () => { S.fn = S.fn === f.name ? '' : f.name; writeURL(true); renderChangesSel(); loadFunctionTimeline().catch(showError); };
    tb.appendChild(tr);
  }
}

function renderChangesSel() {
  for (const tr of $('changes').tBodies[0].rows) tr.classList.toggle('on', tr.cells[0].textContent === S.fn);
}

/* The picked function's series over the timeline's range (TL.fn). */
async function loadFunctionTimeline() {
  if (!S.fn || !S.type) { TL.fn = null; drawTimeline(); fnLegend(); return; }
  const [a, b] = range(S.from, S.until);
  const r = await api('/api/function-timeline?' + new URLSearchParams({
    query: S.type + selector(), from: String(Math.floor(a / 1000)), until: String(Math.ceil(b / 1000)), function: S.fn }));
  const j = await r.json();
  const t = j.timeline || {};
  TL.fn = { name: S.fn, start: Number(t.startTime) * 1000, step: Number(t.durationDelta) * 1000, samples: (t.samples || []).map(Number) };
  drawTimeline();
  fnLegend();
}

function fnLegend() {
  const old = $('tlLegend').querySelector('.fn');
  if (old) old.remove();
  if (!TL.fn) return;
  const item = document.createElement('span');
  item.className = 'fn';
  item.title = 'Remove this function\'s line';
  item.textContent = '\u2014 ' + TL.fn.name + ' \u00d7';
  item.onclick = () => { S.fn = ''; writeURL(true); renderChangesSel(); loadFunctionTimeline().catch(showError); };
  $('tlLegend').appendChild(item);
}

async function loadView() {
  const seq = ++loadSeq;
  showError(null);
  syncInputs();
  setTabs();
  if (S.view === 'adhoc') {
    if (cur.adhoc) setFlame(cur.adhoc, null); else { cur.flame = null; showView(); }
    return;
  }
  try {
    await loadServices();
    if (seq !== loadSeq) return;
    writeURL(false);
    syncInputs();
    if (!S.type) { cur.flame = null; showView(); $('capMain').textContent = 'No data yet: send a profile to /ingest.'; return; }
    const jobs = [loadTimeline(seq), loadLabelNames()];
    jobs.push(S.view === 'diff' ? loadDiff(seq) : loadFlame(seq));
    const res = await Promise.allSettled(jobs);
    for (const r of res) if (r.status === 'rejected') showError(r.reason);
  } catch (e) {
    showError(e);
  }
}

/* ----------------------------------------------------------- showing */

function setTabs() {
  for (const b of $('tabs').querySelectorAll('button')) b.classList.toggle('on', b.dataset.view === S.view);
  $('diffForm').hidden = S.view !== 'diff';
  $('changesBox').hidden = S.view !== 'diff' || $('changesBox').dataset.none === '1' || !$('changes').tBodies[0].rows.length;
  $('adhocForm').hidden = S.view !== 'adhoc';
  $('main').className = S.view;
  $('timelineBox').hidden = S.view === 'adhoc';
  $('filters').hidden = S.view === 'adhoc';
  $('exPprof').disabled = S.view === 'adhoc' || S.view === 'diff';
  if (STANDALONE) { $('timelineBox').hidden = true; $('filters').hidden = true; }
}

function showView() {
  setTabs();
  const f = cur.flame;
  const v = S.view;
  $('sideBySide').hidden = v !== 'diff';
  $('diffLegend').textContent = '';
  if (v === 'diff') diffLegend($('diffLegend'));
  const sw = v === 'sandwich';
  $('flame2').hidden = !sw; $('capCallees').hidden = !sw;
  $('total').textContent = f && f.n ? 'Total ' + fmtValue(f.diff ? f.diff.rightTicks : f.total[0], f.unit) : '';
  if (v === 'table' || v === 'both' || sw) renderTable();
  if (sw) {
    if (!f || !S.sandwich) {
      $('capMain').textContent = 'Pick a function in the table to see its callers (above) and callees (below).';
      main.setData(null); main.draw(); second.setData(null); second.draw();
      return;
    }
    const sf = sandwichFlames(f, S.sandwich);
    main.setData(sf.callers); main.rootAtTop = false; main.search = S.search; main.computeMatches();
    second.setData(sf.callees); second.rootAtTop = true; second.search = S.search; second.computeMatches();
    $('capMain').textContent = `Callers of ${S.sandwich}`;
    $('capCallees').textContent = `Callees of ${S.sandwich}`;
    main.draw(); second.draw();
    return;
  }
  if (main.f !== f) { main.setData(f); main.focus = main.nodeAt(S.focus); }
  main.rootAtTop = S.icicle === '1';
  main.search = S.search;
  main.computeMatches();
  $('capMain').textContent = f && f.title ? f.title : '';
  if (v !== 'table') main.draw();
  if (v === 'diff') {
    for (const s of [left, right]) { s.rootAtTop = main.rootAtTop; s.search = S.search; s.computeMatches(); s.draw(); }
  }
  const si = $('searchInfo');
  si.textContent = S.search && f ? `${main.matchCount} frames match, ${pct(main.matchTotal, f.total[0])} of total` : '';
}

function syncInputs() {
  $('from').value = S.from; $('until').value = S.until;
  $('search').value = S.search;
  $('icicle').checked = S.icicle === '1';
  const chips = $('chips');
  chips.textContent = '';
  for (const m of splitMatchers(S.filters)) {
    const c = document.createElement('span');
    c.className = 'chip';
    c.textContent = m;
    const x = document.createElement('button');
    x.textContent = '×'; x.title = 'Remove this filter';
    x.onclick = () => { S.filters = splitMatchers(S.filters).filter((y) => y !== m).join(','); S.focus = ''; writeURL(true); loadView(); };
    c.appendChild(x);
    chips.appendChild(c);
  }
}

function splitMatchers(s) {
  const out = [];
  const re = /\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?/g;
  let m;
  while ((m = re.exec(s)) !== null) out.push(`${m[1]}${m[2]}"${m[3]}"`);
  return out;
}

function addFilter(m) {
  const all = splitMatchers(S.filters);
  if (!all.includes(m)) all.push(m);
  S.filters = all.join(',');
  S.focus = '';
  writeURL(true);
  loadView();
}

/* -------------------------------------------------------------- adhoc */

async function gunzip(bytes) {
  const ds = new DecompressionStream('gzip');
  const out = new Response(new Blob([bytes]).stream().pipeThrough(ds));
  return new Uint8Array(await out.arrayBuffer());
}

/* Minimal protobuf reader for pprof (field numbers: docs/wire-formats.md §1). */
function pbFields(b, start, end, fn) {
  let p = start;
  const varint = () => {
    let v = 0, mul = 1, byte;
    do {
      if (p >= end) throw new Error('truncated varint at ' + p);
      byte = b[p++];
      v += (byte & 0x7f) * mul;
      mul *= 128;
    } while (byte & 0x80);
    return v;
  };
  while (p < end) {
    const key = varint(), field = Math.floor(key / 8), wt = key & 7;
    if (wt === 0) fn(field, 0, varint());
    else if (wt === 2) {
      const n = varint();
      if (p + n > end) throw new Error('truncated field ' + field);
      fn(field, 2, p, p + n);
      p += n;
    } else if (wt === 1) p += 8;
    else if (wt === 5) p += 4;
    else throw new Error('bad wire type ' + wt + ' at ' + p);
  }
}

function pbPacked(b, wt, a, bEnd, out) {
  if (wt === 0) { out.push(a); return; }
  let p = a;
  while (p < bEnd) {
    let v = 0, mul = 1, byte;
    do { byte = b[p++]; v += (byte & 0x7f) * mul; mul *= 128; } while (byte & 0x80 && p <= bEnd);
    out.push(v);
  }
}

function parsePprof(b) {
  const strings = [], types = [], samples = [], locs = new Map(), funcs = new Map();
  let defType = 0;
  const dec = new TextDecoder();
  pbFields(b, 0, b.length, (field, wt, a, e) => {
    if (field === 6 && wt === 2) strings.push(dec.decode(b.subarray(a, e)));
    else if (field === 1 && wt === 2) {
      const t = { type: 0, unit: 0 };
      pbFields(b, a, e, (f2, w2, v) => { if (f2 === 1) t.type = v; else if (f2 === 2) t.unit = v; });
      types.push(t);
    } else if (field === 2 && wt === 2) {
      const s = { locs: [], values: [] };
      pbFields(b, a, e, (f2, w2, x, y) => {
        if (f2 === 1) pbPacked(b, w2, x, y, s.locs);
        else if (f2 === 2) pbPacked(b, w2, x, y, s.values);
      });
      samples.push(s);
    } else if (field === 4 && wt === 2) {
      const l = { id: 0, addr: 0, lines: [] };
      pbFields(b, a, e, (f2, w2, x, y) => {
        if (f2 === 1) l.id = x;
        else if (f2 === 3) l.addr = x;
        else if (f2 === 4 && w2 === 2) pbFields(b, x, y, (f3, w3, v) => { if (f3 === 1) l.lines.push(v); });
      });
      locs.set(l.id, l);
    } else if (field === 5 && wt === 2) {
      const fn = { id: 0, name: 0 };
      pbFields(b, a, e, (f2, w2, v) => { if (f2 === 1) fn.id = v; else if (f2 === 2) fn.name = v; });
      funcs.set(fn.id, fn);
    } else if (field === 14 && wt === 0) defType = a;
  });
  if (!types.length) throw new Error('not a pprof profile: no sample types');
  const names = types.map((t) => `${strings[t.type] || '?'}:${strings[t.unit] || '?'}`);
  let def = types.findIndex((t) => t.type === defType && defType);
  if (def < 0) def = types.length - 1;
  /* Frame names of a location, root-most first (line[0] is the innermost). */
  const frames = new Map();
  for (const [id, l] of locs) {
    const fr = l.lines.length ? l.lines.map((fid) => strings[(funcs.get(fid) || {}).name] || '?') : ['0x' + l.addr.toString(16)];
    frames.set(id, fr.reverse());
  }
  const build = (ti) => {
    const root = trieNode('total');
    for (const s of samples) {
      const v = s.values[ti] || 0;
      if (!v) continue;
      root.total += v;
      let t = root;
      for (let k = s.locs.length - 1; k >= 0; k--) {
        for (const nm of frames.get(s.locs[k]) || ['?']) { t = trieChild(t, nm); t.total += v; }
      }
      t.self += v;
    }
    return root;
  };
  return { names, def, build, units: types.map((t) => strings[t.unit] || '') };
}

function parseFolded(text) {
  const root = trieNode('total');
  for (const line0 of text.split('\n')) {
    const line = line0.replace(/\r$/, '');
    const sp = line.lastIndexOf(' ');
    if (sp <= 0) continue;
    const v = Number(line.slice(sp + 1));
    if (!(v > 0)) continue;
    root.total += v;
    let t = root;
    for (const nm of line.slice(0, sp).split(';')) { if (nm === '') continue; t = trieChild(t, nm); t.total += v; }
    t.self += v;
  }
  return root;
}

async function openFile(file) {
  showError(null);
  try {
    let b = new Uint8Array(await file.arrayBuffer());
    if (b[0] === 0x1f && b[1] === 0x8b) b = await gunzip(b);
    let textLike = true;
    for (let i = 0; i < Math.min(b.length, 256); i++) if (b[i] < 9) { textLike = false; break; }
    if (b[0] === 0xff && b[1] === 0xfe) textLike = 'utf-16le';
    if (b[0] === 0xfe && b[1] === 0xff) textLike = 'utf-16be';
    const sel = $('adhocType');
    sel.textContent = '';
    if (textLike) {
      const enc = textLike === true ? 'utf-8' : textLike;
      const root = parseFolded(new TextDecoder(enc).decode(b));
      if (!root.total) throw new Error('no "stack count" lines in ' + file.name);
      fillSelect(sel, ['samples:count'], 'samples:count');
      sel.onchange = null;
      showAdhoc(trieToFlame(root, false, 'count'), file.name);
    } else {
      const p = parsePprof(b);
      fillSelect(sel, p.names, p.names[p.def]);
      const pick = () => {
        const i = p.names.indexOf(sel.value);
        const u = p.units[i];
        showAdhoc(trieToFlame(p.build(i), false, u === 'nanoseconds' ? 'ns' : u === 'bytes' ? 'bytes' : 'count'), file.name + ' ' + sel.value);
      };
      sel.onchange = pick;
      pick();
    }
  } catch (e) {
    showError(new ApiError(0, `cannot read ${file.name}: ${e.message}`, ''));
  }
}

function showAdhoc(f, title) {
  f.title = title + ' (not stored)';
  cur.adhoc = f;
  S.view = 'adhoc';
  S.focus = '';
  writeURL(true);
  setFlame(f, null);
}

/* -------------------------------------------------------------- export */

function download(name, blob) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

/* protobuf writing, just what a request needs: varints and strings. */
function pbVarint(out, v) {
  let x = BigInt(v);
  if (x < 0n) x += 1n << 64n;
  while (x >= 0x80n) { out.push(Number(x & 0x7fn) | 0x80); x >>= 7n; }
  out.push(Number(x));
}
function pbPutString(out, field, s) {
  const b = new TextEncoder().encode(s);
  pbVarint(out, (field << 3) | 2); pbVarint(out, b.length);
  for (const x of b) out.push(x);
}
function pbPutInt(out, field, v) { pbVarint(out, field << 3); pbVarint(out, v); }

async function exportPprof() {
  const [a, b] = range(S.from, S.until);
  const req = [];
  pbPutString(req, 1, S.type);               /* profile_typeID */
  pbPutString(req, 2, selector());           /* label_selector */
  pbPutInt(req, 3, a);                       /* start (ms) */
  pbPutInt(req, 4, b);                       /* end (ms) */
  const r = await api('/querier.v1.QuerierService/SelectMergeProfile', {
    method: 'POST', headers: { 'Content-Type': 'application/proto' }, body: new Uint8Array(req),
  });
  const gz = new Blob([await r.arrayBuffer()]).stream().pipeThrough(new CompressionStream('gzip'));
  download(exportName('pb.gz'), await new Response(gz).blob());
}

function exportName(ext) {
  const base = (S.view === 'adhoc' ? 'adhoc' : (S.service || 'profile') + '-' + (S.type.split(':')[1] || 'profile')).replace(/[^A-Za-z0-9_.-]/g, '_');
  return base + '.' + ext;
}

/* -------------------------------------------------------------- wiring */

function wire() {
  const presets = [['5m', 'now-5m'], ['15m', 'now-15m'], ['1h', 'now-1h'], ['6h', 'now-6h'], ['24h', 'now-24h'], ['7d', 'now-7d']];
  for (const [label, from] of presets) {
    const b = document.createElement('button');
    b.textContent = label; b.title = 'Last ' + label;
    b.onclick = () => { S.from = from; S.until = 'now'; S.focus = ''; S.lfrom = S.luntil = S.rfrom = S.runtil = ''; writeURL(true); loadView(); };
    $('presets').appendChild(b);
  }
  const apply = () => { S.from = $('from').value.trim() || 'now-1h'; S.until = $('until').value.trim() || 'now'; S.focus = ''; writeURL(true); loadView(); };
  $('apply').onclick = apply;
  for (const id of ['from', 'until']) $(id).addEventListener('keydown', (e) => { if (e.key === 'Enter') apply(); });
  $('service').onchange = () => { S.service = $('service').value; S.type = ''; S.focus = ''; S.filters = ''; S.groupBy = ''; writeURL(true); loadView(); };
  $('ptype').onchange = () => { S.type = $('ptype').value; S.focus = ''; writeURL(true); loadView(); };
  $('groupBy').onchange = () => { S.groupBy = $('groupBy').value; writeURL(true); loadTimeline(loadSeq).catch(showError); };
  for (const b of $('tabs').querySelectorAll('button')) {
    b.onclick = () => {
      const was = S.view;
      S.view = b.dataset.view;
      writeURL(true);
      if (S.view === 'diff' || was === 'diff' || S.view === 'adhoc' || was === 'adhoc') loadView(); else showView();
    };
  }
  let st;
  $('search').addEventListener('input', () => {
    clearTimeout(st);
    st = setTimeout(() => { S.search = $('search').value; writeURL(false); showView(); }, 80);
  });
  $('reset').onclick = () => { S.focus = ''; main.focus = 0; writeURL(true); showView(); };
  $('icicle').onchange = () => { S.icicle = $('icicle').checked ? '1' : '0'; writeURL(true); showView(); };
  $('tableFilter').addEventListener('input', renderTable);
  for (const th of $('table').tHead.rows[0].cells) {
    th.onclick = () => {
      const [k, d] = S.sort.split(':');
      S.sort = th.dataset.k + ':' + (k === th.dataset.k && d === 'desc' ? 'asc' : 'desc');
      writeURL(false);
      renderTable();
    };
  }
  $('diffApply').onclick = () => {
    for (const k of ['lfrom', 'luntil', 'rfrom', 'runtil', 'lsel', 'rsel']) S[k] = $(k).value.trim();
    S.focus = '';
    writeURL(true);
    loadView();
  };
  $('file').onchange = () => { if ($('file').files[0]) openFile($('file').files[0]); };
  const drop = $('drop');
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => { e.preventDefault(); drop.classList.remove('over'); if (e.dataTransfer.files[0]) openFile(e.dataTransfer.files[0]); });
  $('exCollapsed').onclick = () => { if (cur.flame) download(exportName('txt'), new Blob([toCollapsed(cur.flame)], { type: 'text/plain' })); };
  $('exJson').onclick = () => { if (cur.flame) download(exportName('json'), new Blob([JSON.stringify(cur.raw || toFlamebearer(cur.flame))], { type: 'application/json' })); };
  $('exPprof').onclick = () => { if (S.type) exportPprof().catch(showError); };
  $('exPng').onclick = () => { $('flame').toBlob((b) => download(exportName('png'), b), 'image/png'); };
  $('tenantBtn').onclick = () => { askTenant(!!apiKey).then((ok) => { if (ok) { S.service = ''; loadView(); } }); };
  window.addEventListener('popstate', () => { S = readURL(); loadView(); });
  let rt;
  window.addEventListener('resize', () => { clearTimeout(rt); rt = setTimeout(() => { drawTimeline(); showView(); }, 100); });
  timelineEvents();
}

/* ---------------------------------------------------- standalone pages */

/* A page /render?format=html wrote (querier/render.c): the /render answer
 * is in the page and no server is behind it, so the pickers, the
 * timeline, the comparison, adhoc files and the pprof export go (CSS
 * .standalone); the flamegraph, table and sandwich views work as ever. */
function showStandalone(j) {
  STANDALONE = true;
  document.body.classList.add('standalone');
  document.title = j.title + ' - Smolder';
  const f = decodeFlamebearer(j.render.flamebearer, j.render.metadata);
  f.unit = j.unit;
  f.title = j.title;
  if (!['flame', 'table', 'both', 'sandwich'].includes(S.view)) S.view = 'flame';
  setFlame(f, j.render);
}

/* For tests and the curious: the live state. */
window.smolder = { get state() { return S; }, get standalone() { return STANDALONE; }, TL, cur, main, second, left, right, decodeFlamebearer, toFlamebearer, toCollapsed, trieToFlame, parseFolded, parsePprof };

wire();
if ($('smolder-profile')) showStandalone(JSON.parse($('smolder-profile').textContent));
else { showTenant(); loadView(); }
