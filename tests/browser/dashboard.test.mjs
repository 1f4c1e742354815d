// dashboard.test.mjs - the dashboard in headless Chromium against a live
// server that tests/integration/test_dashboard.sh has filled (nodes, links,
// a running 2x2 job).  Every value checked on a page is compared with what
// the API answers at that moment.  Prints "ok - ..." / "not ok - ..." lines;
// exits 1 if any check failed or the run broke off.
//
// usage: node dashboard.test.mjs FIXTURE.json SCREENSHOT_DIR
//   FIXTURE: {url, admin, job_id, free_nodes: [ids], chromium,
//             tasklets: [{stage, replica, node_id, token}]}
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [fixturePath, shots] = process.argv.slice(2);
if (!fixturePath || !shots) {
  console.error('usage: node dashboard.test.mjs FIXTURE.json SCREENSHOT_DIR');
  process.exit(2);
}
const fx = JSON.parse(fs.readFileSync(fixturePath, 'utf8'));
const WAIT = { timeout: 30000 };   // ms; the machines are slow and shared: wait for things, never sleep

let failures = 0;
const ok = (name) => console.log('ok - ' + name);
const fail = (name, detail) => {
  failures++;
  console.log(`not ok - ${name}${detail ? ': ' + String(detail).split('\n')[0] : ''}`);
};
const check = (name, got, want) => {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g === w) ok(name); else fail(name, `got ${g}, want ${w}`);
};
// near NAME GOT WANT REL: |got - want| <= rel * |want|.
const near = (name, got, want, rel) => {
  if (Number.isFinite(got) && Math.abs(got - want) <= rel * Math.abs(want)) ok(name);
  else fail(name, `got ${got}, want ${want} (within ${rel * 100}%)`);
};
// A group of checks that stops at its first exception (a selector that
// never appeared) and reports it as one failure.
async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    fail(name, e.message);
  }
}

async function api(method, p, token, body) {
  const r = await fetch(fx.url + p, {
    method,
    headers: Object.assign({ Authorization: 'Bearer ' + (token || fx.admin) },
      body ? { 'Content-Type': 'application/json' } : {}),
    body: body ? JSON.stringify(body) : undefined,
  });
  const data = await r.json();
  if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${JSON.stringify(data)}`);
  return data;
}

// "540 ms" -> 0.54; "1.2 s" -> 1.2 (the dashboard's time format).
function seconds(text) {
  const m = text.trim().match(/^([0-9.e+-]+) (µs|ms|s)$/);
  if (!m) return NaN;
  return Number(m[1]) * { 'µs': 1e-6, ms: 1e-3, s: 1 }[m[2]];
}

const browser = await chromium.launch({
  executablePath: fx.chromium || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
});
const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
const pageErrors = [];
const cspErrors = [];
const requests = [];
page.on('pageerror', (e) => pageErrors.push(e.message));
page.on('console', (m) => { if (/Content Security Policy/i.test(m.text())) cspErrors.push(m.text()); });
page.on('request', (r) => requests.push({ url: r.url(), auth: r.headers().authorization || null }));
// Saves a screenshot, after checking that the page shows no value that
// went missing on the way ("null", "undefined", "NaN").
const shot = async (name) => {
  const leftovers = await page.evaluate(() =>
    (document.body.innerText.match(/\b(null|undefined|NaN)\b/g) || []));
  check(`${name}: no null, undefined or NaN on the page`, leftovers, []);
  await page.screenshot({ path: path.join(shots, name + '.png'), fullPage: true });
};
const text = (sel) => page.locator(sel).first().textContent({ timeout: WAIT.timeout });
const attr = (sel, a) => page.locator(sel).first().getAttribute(a, { timeout: WAIT.timeout });

try {
  // ---- the token
  await step('login', async () => {
    await page.goto(fx.url + '/');
    await page.locator('#login-token').waitFor(WAIT);
    ok('without a token the dashboard asks for one');
    await shot('login');
    await page.fill('#login-token', 'shoal_admin_wrong');
    await page.press('#login-token', 'Enter');
    await page.locator('#login-reason', { hasText: '401' }).waitFor(WAIT);
    ok('a wrong token is refused (401) and asked for again');
    check('and is not kept', await page.evaluate(() => sessionStorage.getItem('shoal.admin_token')), null);
    await page.fill('#login-token', fx.admin);
    await page.press('#login-token', 'Enter');
    await page.locator('#fleet-table').waitFor(WAIT);
    ok('the admin token opens the fleet');
    check('the token is kept in session storage', await page.evaluate(() => sessionStorage.getItem('shoal.admin_token')), fx.admin);
    check('and not in local storage', await page.evaluate(() => Object.keys(localStorage).length), 0);
  });

  // ---- the fleet
  await step('fleet', async () => {
    const nodes = (await api('GET', '/v1/nodes')).nodes;
    const job = await api('GET', '/v1/jobs/' + fx.job_id);
    await page.locator('#fleet-table tbody tr').nth(nodes.length - 1).waitFor(WAIT);
    check('the fleet lists every node', await page.locator('#fleet-table tbody tr').count(), nodes.length);
    let names = 0, tflops = 0, states = 0, roles = 0;
    for (const n of nodes) {
      const row = `#fleet-table tr[data-node-id="${n.id}"]`;
      if ((await text(`${row} td[data-col="name"]`)) === n.name) names++;
      if ((await text(`${row} td[data-col="tflops"]`)) === String(n.hardware.tflops)) tflops++;
      if ((await attr(`${row} td[data-col="state"] .badge`, 'data-state')) === n.state) states++;
      const a = job.plan.assignments.find((x) => x.node_id === n.id);
      const cell = page.locator(`${row} td[data-col="role"]`);
      if (a) {
        const t = await cell.textContent();
        if ((await cell.getAttribute('data-stage')) === String(a.stage) &&
            (await cell.getAttribute('data-replica')) === String(a.replica) &&
            t.includes(job.name) && t.includes(`stage ${a.stage}`)) roles++;
      } else if ((await cell.textContent()) === '—') {
        roles++;
      }
    }
    check('every node\'s name is shown as the API has it', names, nodes.length);
    check('every node\'s measured TFLOP/s is shown', tflops, nodes.length);
    check('every node\'s state is shown', states, nodes.length);
    check('every node\'s current role matches the plan (or none)', roles, nodes.length);
    const evil = nodes.find((n) => n.name.startsWith('<img'));
    check('a node name that looks like markup is shown as text',
      await text(`#fleet-table tr[data-node-id="${evil.id}"] td[data-col="name"]`), evil.name);
    check('and makes no element', await page.locator('#fleet-table img').count(), 0);
    check('nor runs', await page.evaluate(() => window.__xss === undefined), true);
    const live = nodes.filter((n) => n.state === 'idle' || n.state === 'busy').reduce((a, n) => a + n.hardware.tflops, 0);
    near('the fleet\'s total TFLOP/s', Number(await text('.card[data-card="TFLOP/s"] .card-value')), live, 5e-4);
    await shot('fleet');
  });

  // ---- the network
  await step('network', async () => {
    const links = await api('GET', '/v1/links');
    const nodes = (await api('GET', '/v1/nodes')).nodes;
    const N = links.nodes.length;
    await page.click('nav a[data-route="network"]');
    await page.locator('#heatmap').waitFor(WAIT);
    check('the heatmap has a cell per ordered pair of nodes', await page.locator('#heatmap g.cell').count(), N * N);
    check('of which N*(N-1) are links', await page.locator('#heatmap g.cell:not(.self)').count(), N * (N - 1));
    const drawn = await page.$$eval('#heatmap g.cell', (cells) => cells.map((c) => ({
      from: Number(c.dataset.from), to: Number(c.dataset.to), value: c.dataset.value,
      text: c.querySelector('text.cell-text') ? c.querySelector('text.cell-text').textContent : null,
      title: c.querySelector('title').textContent })));
    let values = 0, numbers = 0, unreachable = 0, marked = 0;
    for (const c of drawn) {
      const i = links.nodes.indexOf(c.from), j = links.nodes.indexOf(c.to);
      if (i === j) continue;
      if (links.reachable[i][j] === false) {   // its agent could not connect: shown so, not as a number
        unreachable++;
        if (c.text === '✕' && c.value === '' && c.title.includes(': unreachable (')) marked++;
        continue;
      }
      const bw = links.bandwidth_gbps[i][j];
      if (Number(c.value) === bw) values++;
      if (c.text === String(bw)) numbers++;
    }
    check('the fixture has a direction its agent could not connect', unreachable, 1);
    check('which is shown as unreachable, not as a number nor "not measured"', marked, unreachable);
    check('the legend names it', (await text('.legend')).includes('unreachable'), true);
    check('every other cell holds its link\'s bandwidth', values, N * (N - 1) - unreachable);
    check('and shows it as a number', numbers, N * (N - 1) - unreachable);
    const a = nodes.find((n) => n.id === links.nodes[0]), b = nodes.find((n) => n.id === links.nodes[1]);
    const title = drawn.find((c) => c.from === a.id && c.to === b.id).title;
    check('a cell\'s hover text names both nodes and the bandwidth',
      title.startsWith(`${a.name} (${a.region}) → ${b.name} (${b.region}): ${links.bandwidth_gbps[0][1]} Gbit/s, ${links.latency_ms[0][1]} ms`), true);
    await page.hover(`#heatmap g.cell[data-from="${a.id}"][data-to="${b.id}"]`);
    check('and hovering shows the raw numbers', (await text('#heat-info')) === title, true);
    await shot('network-bandwidth');
    await page.click('button[data-metric="latency"]');
    await page.locator('#heatmap[data-metric="latency"]').waitFor(WAIT);
    const lat = await page.$$eval('#heatmap g.cell:not(.self):not(.unreachable)', (cells) => cells.map((c) =>
      [Number(c.dataset.from), Number(c.dataset.to), Number(c.dataset.value)]));
    check('the latency view holds every link\'s latency', lat.filter(([f, t, v]) =>
      links.latency_ms[links.nodes.indexOf(f)][links.nodes.indexOf(t)] === v).length, N * (N - 1) - unreachable);
    await shot('network-latency');
    await page.click('button[data-metric="bandwidth"]');
  });

  // ---- the jobs
  await step('jobs', async () => {
    const job = await api('GET', '/v1/jobs/' + fx.job_id);
    await page.click('nav a[data-route="jobs"]');
    const row = `#jobs-table tr[data-job-id="${fx.job_id}"]`;
    await page.locator(row).waitFor(WAIT);
    check('the job list shows the job\'s name', await text(`${row} td[data-col="name"]`), job.name);
    check('and its state', await attr(`${row} td[data-col="state"] .badge`, 'data-state'), job.state);
    check('and its progress', await text(`${row} .progress-text`),
      `${job.latest_step} / ${job.spec.training.steps} steps`);
    await shot('jobs');
  });

  // ---- one job
  await step('job detail', async () => {
    await page.click(`#jobs-table tr[data-job-id="${fx.job_id}"] td[data-col="name"] a`);
    await page.locator('#plan-grid').waitFor(WAIT);
    await page.locator('#loss-chart').waitFor(WAIT);
    const job = await api('GET', '/v1/jobs/' + fx.job_id);
    const nodes = new Map((await api('GET', '/v1/nodes')).nodes.map((n) => [n.id, n]));
    const P = job.spec.parallelism.stages, D = job.spec.parallelism.replicas;
    check('the plan grid has a cell per tasklet', await page.locator('#plan-grid td.tasklet[data-stage]').count(), P * D);
    let named = 0;
    for (const a of job.plan.assignments) {
      const cell = `#plan-grid td[data-stage="${a.stage}"][data-replica="${a.replica}"]`;
      if ((await attr(cell, 'data-node-id')) === String(a.node_id) &&
          (await text(`${cell} .tasklet-node`)) === nodes.get(a.node_id).name) named++;
    }
    check('each plan cell names the node the plan assigns', named, job.plan.assignments.length);

    // Stragglers: the cells the API flags are marked, and only those.
    const flagged = job.measured.filter((t) => t.straggler).map((t) => [t.stage, t.replica]);
    check('the fixture has a straggler', flagged.length > 0, true);
    const marked = await page.$$eval('#plan-grid td.tasklet.straggler', (cells) => cells.map((c) =>
      [Number(c.dataset.stage), Number(c.dataset.replica)]));
    check('the plan grid marks exactly the straggling tasklets', marked, flagged);
    check('with a tag in the cell', await page.locator('#plan-grid td.tasklet.straggler .straggler-tag').count(), flagged.length);
    check('the straggler line counts them', Number(await attr('#stragglers', 'data-count')), job.stragglers.length);
    const line = await text('#stragglers');
    const s0 = job.stragglers[0];
    check('and names the first with its node and slowdown',
      line.includes(`stage ${s0.stage} replica ${s0.replica} on ${nodes.get(s0.node_id).name} computes ` +
        `${Number(s0.slowdown.toPrecision(3))}× its predicted time`), true);
    check('and says that Schedule re-plans from the latest checkpoint', line.includes('Schedule re-plans the job from its latest checkpoint'), true);
    const peer = job.measured.find((t) => !t.straggler);
    check('a peer\'s cell shows its slowdown', (await text(`#plan-grid td[data-stage="${peer.stage}"][data-replica="${peer.replica}"]`))
      .includes(`compute ${Number(peer.slowdown.toPrecision(3))}× predicted`), true);
    check('the running job can be re-planned: its Schedule form is shown', await page.locator('#schedule-plan').isVisible(), true);
    check('below its plan, not above it', await page.evaluate(() => Boolean(document.querySelector('#plan-grid')
      .compareDocumentPosition(document.querySelector('#schedule-plan')) & Node.DOCUMENT_POSITION_FOLLOWING)), true);
    check('and Schedule is not the page\'s primary button', await page.locator('#schedule-plan.primary').count(), 0);
    check('the plan lists each of its links', await page.locator('#plan-links tbody tr').count(), job.plan.links.length);
    const ways = await page.$$eval('#plan-links tbody tr', (rows) => rows.map((r) =>
      [r.dataset.kind, r.dataset.way, Number(r.dataset.from), Number(r.dataset.to)]));
    check('each with its kind, its ends and how it is made', ways,
      job.plan.links.map((l) => [l.kind, l.way, l.from.node_id, l.to.node_id]));
    const turned = job.plan.links.filter((l) => l.way === 'reverse').length;
    check('the summary counts the dialled and the turned ones', (await text('#plan-links-summary'))
      .includes(`${job.plan.links.length - turned} dialled, ${turned} turned, 0 relayed`), true);
    check('the plan shows its predicted bytes per step, stage links beside sync',
      [Number(await attr('#plan-bytes', 'data-stage-links')), Number(await attr('#plan-bytes', 'data-sync'))],
      [job.plan.bytes_per_step.stage_links, job.plan.bytes_per_step.sync]);

    const losses = job.progress.losses;
    check('the loss curve has a point per reported step', await page.locator('#loss-chart circle.loss-point').count(), losses.length);
    check('and its polyline too', (await attr('#loss-chart polyline.loss-line', 'points')).split(' ').length, losses.length);
    const last = losses[losses.length - 1];
    const lastPoint = page.locator('#loss-chart circle.loss-point').last();
    check('the last point is the last step\'s loss',
      [Number(await lastPoint.getAttribute('data-step')), Number(await lastPoint.getAttribute('data-loss'))], last);
    near('and the caption says so', Number((await text('#loss-caption')).match(/the loss is (\d+(?:\.\d+)?(?:e[+-]?\d+)?)/)[1]), last[1], 1e-4);
    const vals = job.progress.val_losses;
    check('the fixture has validation losses', vals.length > 0, true);
    check('validation: a point per evaluation on the same chart', await page.locator('#loss-chart rect.val-point').count(), vals.length);
    check('and a line through them', (await attr('#loss-chart polyline.val-line', 'points')).split(' ').length, vals.length);
    const lastVal = page.locator('#loss-chart rect.val-point').last();
    check('the last validation point is the latest evaluation',
      [Number(await lastVal.getAttribute('data-step')), Number(await lastVal.getAttribute('data-loss'))], vals[vals.length - 1]);
    check('a legend tells the two lines apart', (await text('#loss-legend')).includes('validation loss'), true);
    near('the validation card shows the latest validation loss',
      Number(await text('.card[data-card="validation loss"] .card-value')), job.progress.val_loss, 1e-4);
    check('the sent-per-step card splits stage links and sync',
      (await text('.card[data-card="sent per step"] .card-note')).includes('stage links'), true);

    near('the predicted iteration time is the plan\'s',
      seconds(await text('#time-table tr[data-row="iteration"] td[data-col="predicted"]')), job.plan.predicted_iteration_s, 1e-2);
    const slowest = Math.max(...job.measured.map((t) => t.iteration_s));
    near('the measured one is the slowest tasklet\'s median',
      seconds(await text('#time-table tr[data-row="iteration"] td[data-col="measured"]')), slowest, 1e-2);
    near('the predicted compute time is the breakdown\'s',
      seconds(await text('#time-table tr[data-row="compute"] td[data-col="predicted"]')), job.plan.breakdown.compute_s, 1e-2);
    const perReplica = new Map();
    for (const t of job.measured) perReplica.set(t.replica, Math.max(perReplica.get(t.replica) || 0, t.tokens));
    const tokens = [...perReplica.values()].reduce((a, b) => a + b, 0);
    near('tokens/s is a step\'s tokens over the step time', Number(await text('.card[data-card="tokens/s"] .card-value')),
      tokens / slowest, 5e-4);

    check('a bar per stage', await page.locator('#stage-bars g.bar').count(), P);
    for (let s = 0; s < P; s++) {
      const ts = job.measured.filter((t) => t.stage === s);
      const mean = (f) => ts.reduce((a, t) => a + f(t), 0) / ts.length;
      const part = async (p) => Number(await attr(`#stage-bars g.bar[data-row="${s}"] rect[data-part="${p}"]`, 'data-seconds'));
      near(`stage ${s}: compute is the mean of its tasklets' medians`, await part('compute'), mean((t) => t.compute_s), 1e-9);
      near(`stage ${s}: communication is send + wait`, await part('comm'), mean((t) => t.send_s + t.recv_wait_s), 1e-9);
      near(`stage ${s}: bubble`, await part('bubble'), mean((t) => t.bubble_s), 1e-9);
    }
    await shot('job');
  });

  // ---- a job that failed once: its judged report, and no panel without
  await step('failures', async () => {
    check('the running job has no failures panel', await page.locator('#fault-table').count(), 0);
    await page.goto(fx.url + '/#/jobs/' + fx.fault_job_id);
    await page.locator('#fault-table').waitFor(WAIT);
    const job = await api('GET', '/v1/jobs/' + fx.fault_job_id);
    const nodes = new Map((await api('GET', '/v1/nodes')).nodes.map((n) => [n.id, n]));
    check('the fixture has a judged failure', job.faults.length > 0 && job.faults.every((f) => f.verdict), true);
    check('a row per failure report', await page.locator('#fault-table tbody tr').count(), job.faults.length);
    const f = job.faults[0];
    check('with its verdict', await text('#fault-table tbody tr td[data-col="verdict"]'), f.verdict);
    check('and its culprit by name', await text('#fault-table tbody tr td[data-col="culprit"]'), nodes.get(f.culprit_node).name);
    check('and why', (await text('#fault-table tbody tr td.wrap')), f.judgement);
    check('a cancelled job leaves nobody out of a next plan', await page.locator('#excluded').count(), 0);
    await shot('failures');
    await page.goto(fx.url + '/#/jobs/' + fx.job_id);
    await page.locator('#plan-grid').waitFor(WAIT);
  });

  // ---- the page refreshes itself
  await step('refresh', async () => {
    const job = await api('GET', '/v1/jobs/' + fx.job_id);
    const next = job.latest_step;   /* steps trained: the next step's index */
    for (const t of fx.tasklets) {
      await api('POST', '/v1/agent/progress', t.token, {
        job_id: fx.job_id, epoch: job.plan.epoch, step: next, stage: t.stage, replica: t.replica,
        loss: t.stage === job.spec.parallelism.stages - 1 ? 3.5 + 0.1 * t.replica : null,
        iteration_s: 0.6, compute_s: 0.3, send_s: 0.02, recv_wait_s: 0.02, allreduce_s: 0.04, bubble_s: 0.05, tokens: 256,
      });
    }
    const want = job.progress.losses.length + 1;
    await page.locator(`#loss-chart[data-points="${want}"]`).waitFor(WAIT);
    ok('a new step appears on the job page without a reload');
    check('with its loss', Number(await page.locator('#loss-chart circle.loss-point').last().getAttribute('data-loss')), 3.55);
  });

  // ---- a hidden tab asks nothing
  await step('hidden', async () => {
    const setVisibility = (state) => page.evaluate((s) => {
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => s });
      document.dispatchEvent(new Event('visibilitychange'));
    }, state);
    await setVisibility('hidden');
    const before = requests.length;
    await page.waitForTimeout(12000);   // more than two refresh periods
    check('a hidden tab sends no request', requests.length - before, 0);
    const next = page.waitForRequest((r) => r.url().includes('/v1/jobs/' + fx.job_id), WAIT);
    await setVisibility('visible');
    await next;
    ok('and refreshes as soon as it is visible again');
  });

  // ---- the server away
  await step('unreachable', async () => {
    await page.route('**/v1/**', (r) => r.abort('connectionrefused'));
    await page.locator('#banner', { hasText: 'cannot be reached' }).waitFor(WAIT);
    ok('an unreachable server is reported');
    await shot('unreachable');
    await page.unroute('**/v1/**');
    await page.locator('#banner').waitFor({ state: 'hidden', timeout: 90000 });
    ok('and the report goes once it answers again');
  });

  // ---- submitting a job
  await step('submit', async () => {
    await page.click('nav a[data-route="submit"]');
    await page.locator('#job-form').waitFor(WAIT);
    await page.fill('input[name="name"]', 'browser-job');
    await page.selectOption('select[name="model.architecture"]', 'llama');
    check('choosing llama shows its own fields', await page.isVisible('input[name="model.ffn_dim"]'), true);
    await page.selectOption('select[name="model.architecture"]', 'gpt2');
    check('and gpt2 hides them', await page.isVisible('input[name="model.ffn_dim"]'), false);
    await page.fill('input[name="model.heads"]', '7');
    await page.click('#submit-job');
    await page.locator('#submit-result .error').waitFor(WAIT);
    check('a spec the server refuses shows why', (await text('#submit-result .error')).includes('divisible'), true);
    check('and marks the field', await attr('input[name="model.d_model"]', 'aria-invalid'), 'true');
    await page.fill('input[name="model.heads"]', '4');
    await page.click('#submit-job');
    await page.locator('#created').waitFor(WAIT);
    const href = await attr('#created a', 'href');
    const id = Number(href.split('/').pop());
    let job = await api('GET', '/v1/jobs/' + id);
    check('the form creates the job as typed', [job.name, job.state, job.spec.parallelism.stages, job.spec.parallelism.replicas],
      ['browser-job', 'pending', 2, 1]);
    await page.locator('#preview-grid').waitFor(WAIT);
    const preview = await page.$$eval('#preview-grid td.tasklet', (cells) => cells.map((c) => Number(c.dataset.nodeId)));
    check('the dry run previews a plan on the nodes no live plan holds', preview.slice().sort((a, b) => a - b),
      fx.free_nodes.filter((n) => preview.includes(n)).sort((a, b) => a - b));
    check('with a tasklet per cell', preview.length, 2);
    check('and shows the predicted time', (await text('#preview-summary')).includes('Predicted iteration'), true);
    job = await api('GET', '/v1/jobs/' + id);
    check('a preview stores nothing', [job.state, job.plan], ['pending', null]);
    await shot('submit-preview');
    await page.click('#schedule-plan');
    await page.waitForURL(new RegExp(`#/jobs/${id}$`), WAIT);
    await page.locator('#plan-grid td.tasklet[data-stage]').first().waitFor(WAIT);
    job = await api('GET', '/v1/jobs/' + id);
    check('Schedule stores the plan', [job.state, job.plan && job.plan.epoch], ['scheduled', 1]);
    const grid = await page.$$eval('#plan-grid td.tasklet[data-stage]', (cells) => cells.map((c) =>
      [Number(c.dataset.stage), Number(c.dataset.replica), Number(c.dataset.nodeId)]));
    check('and the job page shows it', grid, job.plan.assignments.map((a) => [a.stage, a.replica, a.node_id]));
    await shot('submitted-job');
    await page.click('nav a[data-route="jobs"]');
    await page.locator(`#jobs-table tr[data-job-id="${id}"]`).waitFor(WAIT);
    check('the new job is in the list', await text(`#jobs-table tr[data-job-id="${id}"] td[data-col="name"]`), 'browser-job');
    await shot('jobs-after-submit');
  });

  // ---- where the token went
  await step('token', async () => {
    const leaks = requests.filter((r) => r.url.includes(fx.admin));
    check('no request URL ever carried the token', leaks.length, 0);
    check('the page URL does not either', page.url().includes(fx.admin), false);
    const apiCalls = requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/'));
    check('every API call sent it as a bearer token',
      apiCalls.length > 0 && apiCalls.every((r) => r.auth === 'Bearer ' + fx.admin || r.auth === 'Bearer shoal_admin_wrong'), true);
    check('only to this server', requests.every((r) => r.url.startsWith(fx.url + '/')), true);
    await page.click('#forget');
    await page.locator('#login-token').waitFor(WAIT);
    check('"Forget token" forgets it', await page.evaluate(() => sessionStorage.getItem('shoal.admin_token')), null);
  });

  check('no script error on any page', pageErrors, []);
  check('nothing the security policy had to block', cspErrors, []);
} catch (e) {
  fail('the browser run', e.message);
} finally {
  await browser.close();
}
process.exit(failures ? 1 : 0);
