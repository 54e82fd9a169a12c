/*
 * webui_test.js -- drive Smolder's web UI in headless Chromium.
 *
 * Run by tests/integration/test_webui.py, which starts the real binary,
 * ingests the profiles named below and reads this script's stdout: one
 * JSON object a line, {"check", "ok", "detail"} or {"measure", "ms"}.
 *
 * Environment: SM_URL (the server), SM_MT_URL (a server with
 * multitenancy on, tenant SM_MT_TENANT has data), SM_ARTIFACTS (where
 * screenshots go), SM_ADHOC (a pprof file), CHROMIUM (the browser).
 */
'use strict';

const { chromium } = require('playwright-core');

const URL0 = process.env.SM_URL;
const ART = process.env.SM_ARTIFACTS;
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const check = (ok, what, detail) => out({ check: what, ok: !!ok, detail: ok ? '' : String(detail || '') });

/* Count painted pixels of a canvas, and the colour at (x, y) CSS pixels. */
async function canvasInfo(page, id, x, y) {
  return page.evaluate(({ id, x, y }) => {
    const c = document.getElementById(id);
    const g = c.getContext('2d');
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let painted = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) painted++;
    let at = null;
    if (x !== undefined) {
      const k = c.width / c.clientWidth;
      const p = g.getImageData(Math.round(x * k), Math.round(y * k), 1, 1).data;
      at = [p[0], p[1], p[2], p[3]];
    }
    return { painted, area: c.width * c.height, at };
  }, { id, x, y });
}

/* CSS-pixel box of the first node named `name` in the main flamegraph. */
async function nodeBox(page, name, view = 'main') {
  return page.evaluate(({ name, view }) => {
    const v = window.smolder[view], f = v.f;
    const ni = f.names.indexOf(name);
    for (let i = 0; i < f.n; i++) {
      if (f.name[i] !== ni) continue;
      const fo = v.focus, span = f.total[fo], k = v.w / span;
      if (f.x[i] < f.x[fo] || f.x[i] >= f.x[fo] + span) continue;
      const d = f.depth[i];
      const y = v.rootAtTop ? d * 18 : v.h - (d + 1) * 18;
      return { i, x: (f.x[i] - f.x[fo]) * k, w: f.total[i] * k, y, total: f.total[i] };
    }
    return null;
  }, { name, view });
}

const settled = (page) => page.waitForFunction(() => window.smolder && window.smolder.cur.flame && window.smolder.main.f, null, { timeout: 15000 });

async function shot(page, name) {
  await page.screenshot({ path: `${ART}/${name}.png`, fullPage: false });
}

async function main() {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 }, acceptDownloads: true });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  /* Every Content-Security-Policy violation, as each page sees it,
   * kept here across navigations. */
  const cspViolations = [];
  await page.exposeFunction('smolderCspViolation', (v) => cspViolations.push(v));
  await ctx.addInitScript(() => {
    document.addEventListener('securitypolicyviolation',
      (e) => window.smolderCspViolation(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
  });

  /* 1. cold open: navigation to a drawn flamegraph, with no cache. */
  let t0 = Date.now();
  await page.goto(URL0 + '/');
  await settled(page);
  out({ measure: 'cold page open to drawn flamegraph', ms: Date.now() - t0 });
  const svcs = await page.$$eval('#service option', (o) => o.map((x) => x.value));
  check(svcs.includes('shop') && svcs.includes('big'), 'service picker lists the ingested services', svcs);

  /* 2. pick service and type. */
  await page.selectOption('#service', 'shop');
  await page.waitForFunction(() => location.search.includes('service=shop') && smolder.cur.flame && smolder.cur.flame.title.startsWith('shop'));
  const types = await page.$$eval('#ptype option', (o) => o.map((x) => x.value));
  check(types.includes('process_cpu:cpu:nanoseconds:cpu:nanoseconds'), 'type picker lists the cpu type', types);
  await page.selectOption('#ptype', 'process_cpu:cpu:nanoseconds:cpu:nanoseconds');
  await page.waitForFunction(() => location.search.includes('type=process_cpu'));
  await settled(page);
  await page.waitForTimeout(300);
  const fullTotal = await page.evaluate(() => smolder.cur.flame.total[0]);
  /* shop: 10 baseline profiles (parse 100, render 100) + 10 regressed
   * (parse 100, render 300) at 100 Hz = 6000 samples = 60 s. */
  check(fullTotal === 60e9, 'flamegraph total is every ingested sample (60 s)', fullTotal);
  const root = await canvasInfo(page, 'flame', 300, 3);
  const info = await canvasInfo(page, 'flame');
  check(info.painted > info.area * 0.04 && root.at[0] === 0xb8 && root.at[1] === 0xbe && root.at[2] === 0xc8,
    'flamegraph drawn: canvas painted, root row in the root colour', JSON.stringify(root) + ' painted ' + info.painted);
  const total = await page.textContent('#total');
  check(/Total 1 min/.test(total), 'total shown in readable time units', total);
  await shot(page, 'flamegraph');

  /* tooltip */
  const hb = await nodeBox(page, 'render');
  const cbox = await page.$eval('#flame', (c) => { const r = c.getBoundingClientRect(); return { x: r.left, y: r.top }; });
  await page.mouse.move(cbox.x + hb.x + hb.w / 2, cbox.y + hb.y + 9);
  const tip = await page.textContent('#tooltip');
  check(/render/.test(tip) && /Total/.test(tip) && /Self/.test(tip) && /s \(/.test(tip), 'tooltip shows name, total and self with units', tip);
  await shot(page, 'tooltip');

  /* 3. focus click on "handler". */
  const hbox = await nodeBox(page, 'handler');
  await page.mouse.click(cbox.x + hbox.x + hbox.w / 2, cbox.y + hbox.y + 9);
  await page.waitForFunction(() => location.search.includes('focus='));
  const foc = await page.evaluate(() => ({ path: smolder.state.focus, focus: smolder.main.focus }));
  check(foc.path === 'main;handler', 'click focuses the frame and puts its path in the URL', JSON.stringify(foc));
  const after = await nodeBox(page, 'parse');
  check(after && after.w > hb.w * 0, 'focused view spans the focused frame', JSON.stringify(after));
  await shot(page, 'focus');
  await page.click('#reset');
  await page.waitForFunction(() => !location.search.includes('focus='));
  check(await page.evaluate(() => smolder.main.focus === 0), 'reset shows the whole graph', '');

  /* 4. search. */
  await page.fill('#search', 'rend');
  await page.waitForFunction(() => location.search.includes('search=rend'));
  await page.waitForTimeout(200);
  const si = await page.textContent('#searchInfo');
  const pb = await nodeBox(page, 'parse');
  const rb = await nodeBox(page, 'render');
  const pc = await canvasInfo(page, 'flame', pb.x + 1, pb.y + 2);
  const rc = await canvasInfo(page, 'flame', rb.x + 1, rb.y + 2);
  check(/1 frames match, 66\.67% of total/.test(si), 'search counts matches and their share', si);
  check(pc.at[0] === 0xe9 && pc.at[1] === 0xea && !(rc.at[0] === 0xe9 && rc.at[1] === 0xea),
    'search dims non-matching frames, keeps matches coloured', JSON.stringify([pc.at, rc.at]));
  await shot(page, 'search');
  const shared = page.url();

  /* 5. shared URL restores the view (new page, same link). */
  await page.click('#icicle');
  await page.waitForFunction(() => location.search.includes('icicle=0'));
  const linkFocus = page.url() + '&focus=main%3Bhandler';
  const p2 = await ctx.newPage();
  await p2.goto(linkFocus);
  await settled(p2);
  await p2.waitForTimeout(300);
  const st2 = await p2.evaluate(() => ({ s: smolder.state, focus: smolder.main.f.names[smolder.main.f.name[smolder.main.focus]], top: smolder.main.rootAtTop, search: document.getElementById('search').value, svc: document.getElementById('service').value }));
  check(st2.svc === 'shop' && st2.search === 'rend' && st2.focus === 'handler' && st2.top === false && st2.s.type.startsWith('process_cpu'),
    'a shared URL restores service, type, search, focus and icicle', JSON.stringify(st2));
  await p2.close();
  await page.goto(shared);
  await settled(page);

  /* 6. table sort. */
  await page.fill('#search', '');
  await page.click('#tabs button[data-view=table]');
  await page.waitForSelector('#table tbody tr');
  const rows = async () => page.$$eval('#table tbody tr', (t) => t.map((r) => r.cells[0].textContent));
  let r1 = await rows();
  check(r1[0] === 'render' && r1[1] === 'parse', 'table sorted by self, largest first', r1);
  await page.click('#table th[data-k=self]');
  r1 = await rows();
  check(r1[r1.length - 1] === 'render', 'clicking Self sorts ascending', r1);
  await page.click('#table th[data-k=total]');
  r1 = await rows();
  check(r1[0] === 'main' || r1[0] === 'handler', 'clicking Total sorts by total', r1);
  await page.fill('#tableFilter', 'pars');
  r1 = await rows();
  check(r1.length === 1 && r1[0] === 'parse', 'table filter', r1);
  await shot(page, 'table');
  await page.fill('#tableFilter', '');

  /* 7. sandwich: click the row of "handler". */
  await page.click('#table tbody tr >> text=handler');
  await page.waitForFunction(() => location.search.includes('sandwich=handler'));
  const sw = await page.evaluate(() => ({ callers: smolder.main.f.names, callees: smolder.second.f.names, ct: smolder.second.f.total[0] }));
  check(sw.callers.includes('main') && sw.callees.includes('render') && sw.callees.includes('parse') && !sw.callees.includes('main') && sw.ct === 60e9,
    'sandwich shows callers (main) and callees (parse, render) of handler', JSON.stringify(sw));
  await shot(page, 'sandwich');

  /* 8. timeline zoom changes the URL and the flamegraph total. */
  await page.click('#tabs button[data-view=flame]');
  await page.goto(URL0 + '/?service=shop&type=process_cpu%3Acpu%3Ananoseconds%3Acpu%3Ananoseconds&from=now-1h&until=now');
  await settled(page);
  await page.waitForTimeout(300);
  const tl = await page.$eval('#timeline', (c) => { const r = c.getBoundingClientRect(); return { x: r.left, y: r.top, w: r.width }; });
  await page.mouse.move(tl.x + tl.w * 0.55, tl.y + 40);
  await page.mouse.down();
  await page.mouse.move(tl.x + tl.w * 0.75, tl.y + 40, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction(() => /from=\d+/.test(location.search) && smolder.cur.flame.total[0] !== 60e9, null, { timeout: 10000 }).catch(() => {});
  const z = await page.evaluate(() => ({ url: location.search, total: smolder.cur.flame ? smolder.cur.flame.total[0] : -1 }));
  check(/from=\d+&until=\d+/.test(z.url) && z.total > 0 && z.total < 60e9, 'timeline drag zooms: URL gets the range, flamegraph total shrinks', JSON.stringify(z));
  await shot(page, 'timeline-zoom');

  /* 8b. pprof export: the server's SelectMergeProfile of the view, gzipped;
   * the browser's own pprof parser totals it as the flamegraph. */
  await page.goto(URL0 + '/?service=shop&type=process_cpu%3Acpu%3Ananoseconds%3Acpu%3Ananoseconds&from=now-1h&until=now');
  await settled(page);
  const [dpp] = await Promise.all([page.waitForEvent('download'), page.click('#exPprof')]);
  const ppGz = require('fs').readFileSync(await dpp.path());
  const pp = require('zlib').gunzipSync(ppGz);
  const ppr = await page.evaluate((bytes) => {
    const p = smolder.parsePprof(new Uint8Array(bytes));
    const i = p.names.indexOf('cpu:nanoseconds');
    return { names: p.names, total: i < 0 ? -1 : p.build(i).total, flame: smolder.cur.flame.total[0] };
  }, [...pp]);
  check(ppGz[0] === 0x1f && ppGz[1] === 0x8b && dpp.suggestedFilename().endsWith('.pb.gz') && ppr.total === 60e9 && ppr.flame === 60e9,
    'export pprof: a gzipped pprof from SelectMergeProfile whose total is the flamegraph\'s', JSON.stringify(ppr));

  /* 9. comparison: first half (baseline) vs second half (regression). */
  await page.goto(URL0 + '/?service=shop&type=process_cpu%3Acpu%3Ananoseconds%3Acpu%3Ananoseconds&view=diff');
  await page.waitForFunction(() => smolder.cur.flame && smolder.cur.flame.diff, null, { timeout: 15000 });
  await page.waitForTimeout(300);
  const db = await nodeBox(page, 'render');
  const dp = await nodeBox(page, 'parse');
  const dr = await canvasInfo(page, 'flame', db.x + 1, db.y + 2);
  const dg = await canvasInfo(page, 'flame', dp.x + 1, dp.y + 2);
  const red = dr.at[0] > dr.at[1] + 60, green = dg.at[1] > dg.at[0] + 40;
  check(red && green, 'diff: the regressed frame is red, the shrunk share green', JSON.stringify([dr.at, dg.at]));
  const legend = await page.textContent('#diffLegend');
  check(/\+100%/.test(legend) && /-100%/.test(legend), 'diff legend shown', legend);
  const ticks = await page.evaluate(() => [smolder.cur.flame.diff.leftTicks, smolder.cur.flame.diff.rightTicks]);
  check(ticks[0] === 20e9 && ticks[1] === 40e9, 'diff sides total 20 s and 40 s', ticks);
  const rtd = await page.evaluate(() => {
    const f = smolder.cur.flame, j = smolder.toFlamebearer(f);
    const g = smolder.decodeFlamebearer(j.flamebearer, j.metadata, j);
    if (g.n !== f.n || j.metadata.format !== 'double') return 'n ' + g.n + ' vs ' + f.n;
    for (let i = 0; i < f.n; i++) {
      if (g.diff.l[i] !== f.diff.l[i] || g.diff.r[i] !== f.diff.r[i] || g.x[i] !== f.x[i] || g.name[i] !== f.name[i]) return 'node ' + i;
    }
    return 'ok';
  });
  check(rtd === 'ok', 'the client-side diff encodes as a double flamebearer (the /render-diff format) and decodes back', rtd);
  /* top changes: render's share rose from 50 % to 75 %, parse's fell */
  await page.waitForSelector('#changes tbody tr', { timeout: 15000 });
  const tcRows = await page.$$eval('#changes tbody tr', (rs) => rs.map((r) => [...r.cells].map((c) => c.textContent)));
  check(tcRows.length && tcRows[0][0] === 'render' && tcRows[0][3] === '+25.0 pp' &&
    tcRows[tcRows.length - 1][0] === 'parse', 'top changes: the regressed function first (+25 pp), the shrunk one last', JSON.stringify(tcRows));
  await page.click('#changes tbody tr');
  await page.waitForFunction(() => smolder.TL.fn && smolder.TL.fn.samples.some((v) => v > 0), null, { timeout: 15000 });
  const fnSum = await page.evaluate(() => [smolder.TL.fn.name, smolder.TL.fn.samples.reduce((a, b) => a + b, 0), smolder.state.fn]);
  check(fnSum[0] === 'render' && fnSum[1] === 40e9 && fnSum[2] === 'render',
    'top changes: a click draws the function\'s timeline (render: 40 s over the hour) and keeps it in the URL', JSON.stringify(fnSum));
  await shot(page, 'diff');

  /* 9b. tag explorer: each value of the explored label with its share. */
  await page.goto(URL0 + '/?service=goapp');
  await settled(page);
  await page.waitForFunction(() => [...document.querySelectorAll('#groupBy option')].some((o) => o.value === 'env'), null, { timeout: 10000 });
  await page.selectOption('#groupBy', 'env');
  await page.waitForSelector('#tags .tag', { timeout: 10000 });
  const tagText = await page.textContent('#tags');
  const legendText = await page.textContent('#tlLegend');
  check(/prod 100\.00%/.test(tagText) && /prod/.test(legendText) && /groupBy=env/.test(page.url()),
    'tag explorer lists env=prod with its share, timeline grouped by env', tagText + ' | ' + legendText);
  await page.click('#tags .tag');
  await page.waitForFunction(() => location.search.includes('filters='));
  const chip = await page.textContent('#chips');
  check(/env="prod"/.test(chip) && decodeURIComponent(page.url()).includes('filters=env="prod"'), 'clicking a tag adds a label filter', chip);
  await settled(page);
  await shot(page, 'tags');

  /* 10. 8,192-node flamegraph: load and draw time. */
  await page.goto(URL0 + '/?service=big&type=process_cpu%3Acpu%3Ananoseconds%3Acpu%3Ananoseconds');
  await settled(page);
  await page.waitForTimeout(200);
  const big = await page.evaluate(() => {
    const v = smolder.main, times = [], first = v.lastDrawMs;
    for (let k = 0; k < 10; k++) { v.draw(); times.push(v.lastDrawMs); }
    times.sort((a, b) => a - b);
    const t = performance.now();
    const j = smolder.cur.raw;
    const f = smolder.decodeFlamebearer(j.flamebearer, j.metadata);
    return { n: smolder.cur.flame.n, median: times[5], first, decode: performance.now() - t, nodes: f.n };
  });
  check(big.n >= 8192, 'big flamegraph has >= 8192 nodes', big.n);
  out({ measure: `draw ${big.n}-node flamegraph (median of 10)`, ms: big.median });
  out({ measure: `first draw of the ${big.n}-node flamegraph after load`, ms: big.first });
  out({ measure: `decode ${big.n}-node flamebearer`, ms: big.decode });
  const bi = await canvasInfo(page, 'flame');
  check(bi.painted > bi.area * 0.04, 'big flamegraph painted', bi.painted);
  await shot(page, 'big');

  /* 11. adhoc: a real pprof, parsed in the browser, not stored. */
  await page.click('#tabs button[data-view=adhoc]');
  const before = await (await page.request.get(URL0 + '/api/apps')).text();
  await page.setInputFiles('#file', process.env.SM_ADHOC);
  await page.waitForFunction(() => smolder.cur.adhoc && smolder.main.f === smolder.cur.adhoc, null, { timeout: 10000 });
  const ad = await page.evaluate(() => ({ n: smolder.cur.flame.n, title: smolder.cur.flame.title, types: [...document.querySelectorAll('#adhocType option')].map((o) => o.value), names: smolder.cur.flame.names.slice(0, 50) }));
  const ai = await canvasInfo(page, 'flame');
  const afterApps = await (await page.request.get(URL0 + '/api/apps')).text();
  check(ad.n > 3 && ad.types.length >= 1 && ai.painted > 0 && ad.names.some((x) => /fib|main/.test(x)),
    'adhoc pprof upload is drawn with its sample types', JSON.stringify(ad).slice(0, 400));
  check(before === afterApps, 'adhoc file is not stored', afterApps);
  /* The same file ingested as service "fib": the browser's parse must
   * total what the server's pprof decoder stored. */
  const srv = await (await page.request.get(URL0 + '/render?' + new URLSearchParams({
    query: 'process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="fib"}', from: 'now-1h', until: 'now' }))).json();
  const adTotal = await page.evaluate(() => [smolder.cur.flame.total[0], document.getElementById('adhocType').value]);
  check(adTotal[1] === 'cpu:nanoseconds' && adTotal[0] === srv.flamebearer.numTicks,
    'adhoc parse totals the same as the server for that file', JSON.stringify([adTotal, srv.flamebearer.numTicks]));
  await shot(page, 'adhoc');

  /* 12. exports: collapsed and JSON of the adhoc view. */
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#exCollapsed')]);
  const txt = require('fs').readFileSync(await dl.path(), 'utf8');
  check(/^[^\n]+ \d+\n/.test(txt), 'export collapsed gives "stack value" lines', txt.slice(0, 200));
  const [dj] = await Promise.all([page.waitForEvent('download'), page.click('#exJson')]);
  const fb = JSON.parse(require('fs').readFileSync(await dj.path(), 'utf8'));
  const rt = await page.evaluate((fb) => { const f = smolder.decodeFlamebearer(fb.flamebearer, fb.metadata); return f.n === smolder.cur.flame.n && f.total[0] === smolder.cur.flame.total[0]; }, fb);
  check(rt, 'export JSON is a flamebearer that decodes to the same graph', '');
  const [dpng] = await Promise.all([page.waitForEvent('download'), page.click('#exPng')]);
  const png = require('fs').readFileSync(await dpng.path());
  check(png.slice(1, 4).toString() === 'PNG', 'export PNG', png.length);

  /* 13. API errors are shown. */
  await page.goto(URL0 + '/?service=shop&filters=' + encodeURIComponent('env=~"("'));
  await page.waitForSelector('#error:not([hidden])', { timeout: 10000 }).catch(() => {});
  const et = await page.textContent('#error');
  check(/400/.test(et), 'an API error is shown with its status', et);
  await shot(page, 'error');

  /* 14. multi-tenant: asked once, then sent with every request. */
  if (process.env.SM_MT_URL) {
    const mt = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const mp = await mt.newPage();
    await mp.goto(process.env.SM_MT_URL + '/');
    await mp.waitForSelector('#tenantDlg[open]', { timeout: 10000 });
    await shot(mp, 'tenant');
    await mp.fill('#tenantIn', process.env.SM_MT_TENANT);
    await mp.click('#tenantDlg button');
    await settled(mp);
    const svc = await mp.$eval('#service', (s) => s.value);
    const tb = await mp.textContent('#tenantBtn');
    await mp.reload();
    await settled(mp);
    const asked = await mp.$eval('#tenantDlg', (d) => d.open);
    check(svc === 'shop' && tb.includes(process.env.SM_MT_TENANT) && !asked, 'multi-tenant: tenant asked once and used for every request', svc + ' ' + tb + ' ' + asked);
    await mt.close();
  }

  /* 15. API keys: a 401 with WWW-Authenticate asks for a key, sent as Bearer. */
  if (process.env.SM_KEY_URL) {
    const kc = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const kp = await kc.newPage();
    const auths = [];
    kp.on('request', (q) => { if (q.url().includes('/querier.v1.')) auths.push(q.headers().authorization || ''); });
    await kp.goto(process.env.SM_KEY_URL + '/');
    await kp.waitForSelector('#tenantDlg[open]', { timeout: 10000 });
    const ask = await kp.textContent('#tenantAskText');
    const type = await kp.$eval('#tenantIn', (i) => i.type);
    await kp.fill('#tenantIn', process.env.SM_KEY);
    await kp.click('#tenantDlg button');
    await settled(kp);
    const svc = await kp.$eval('#service', (s) => s.value);
    await kp.reload();
    await settled(kp);
    const asked = await kp.$eval('#tenantDlg', (d) => d.open);
    const sent = auths.filter((a) => a === 'Bearer ' + process.env.SM_KEY).length;
    check(/API key/.test(ask) && type === 'password' && svc === 'shop' && !asked && sent > 0 &&
      !kp.url().includes(process.env.SM_KEY),
      'API keys: asked once (a password field), sent as Bearer, data of the key\'s tenant shown, key not in the URL',
      JSON.stringify({ ask, type, svc, asked, sent }));
    await kc.close();
  }

  /* 16. /render?format=html: the export opens from a file, no server. */
  {
    const q = new URLSearchParams({ query: 'process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="shop"}', from: 'now-1h', until: 'now', format: 'html' });
    const res = await fetch(URL0 + '/render?' + q);
    const html = await res.text();
    const file = require('path').join(ART || require('os').tmpdir(), 'export.html');
    require('fs').writeFileSync(file, html);
    const hc = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const hp = await hc.newPage();
    const herr = [], reqs = [];
    hp.on('pageerror', (e) => herr.push(e.message));
    hp.on('request', (rq) => reqs.push(rq.url()));
    await hp.goto('file://' + file);
    await settled(hp);
    const st = await hp.evaluate(() => ({ sa: smolder.standalone, total: smolder.cur.flame.total[0], title: document.title, hdr: getComputedStyle(document.getElementById('service').parentElement).display }));
    const painted = await canvasInfo(hp, 'flame');
    await hp.click('#tabs button[data-view="table"]');
    const rows = await hp.$$eval('#table tbody tr', (t) => t.length);
    check(res.status === 200 && /text\/html/.test(res.headers.get('content-type')) &&
      st.sa && st.total === 60e9 && /shop/.test(st.title) && st.hdr === 'none' &&
      painted.painted > painted.area * 0.04 && rows > 0 &&
      reqs.every((u) => u.startsWith('file:')) && herr.length === 0,
      '/render?format=html opens from a file with no server: the flamegraph (60 s) drawn, the table works, nothing fetched',
      JSON.stringify({ status: res.status, st, painted: painted.painted, rows, reqs: reqs.filter((u) => !u.startsWith('file:')), herr }));
    await hp.goto(URL0 + '/render?' + q);
    await settled(hp);
    const served = await hp.evaluate(() => smolder.standalone && smolder.cur.flame.total[0]);
    check(served === 60e9 && herr.length === 0 && /sha256-/.test(res.headers.get('content-security-policy') || ''),
      '/render?format=html served by the server runs under its own Content-Security-Policy (the inlined files by hash)',
      JSON.stringify({ served, herr, csp: res.headers.get('content-security-policy') }));
    await hc.close();
  }

  check(errors.length === 0, 'no JavaScript errors', errors.join('\n'));
  const csp = cspViolations;
  check(csp.length === 0, 'no Content-Security-Policy violation in any view', csp.join('\n'));
  const resp = await page.goto(URL0 + '/');
  const hdr = resp.headers();
  check(/script-src 'self'/.test(hdr['content-security-policy'] || '') &&
        /frame-ancestors 'none'/.test(hdr['content-security-policy'] || '') &&
        hdr['x-frame-options'] === 'DENY' && hdr['referrer-policy'] === 'no-referrer',
    'the page is served with a Content-Security-Policy (scripts only from the binary, no framing), X-Frame-Options and Referrer-Policy',
    JSON.stringify(hdr));
  await browser.close();
}

main().catch((e) => { check(false, 'browser script', e.stack); process.exit(1); });
