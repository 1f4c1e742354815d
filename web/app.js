// app.js - the shoal dashboard: a single page over the REST API (/v1).
//
// Views, one per hash route: #/fleet, #/network, #/jobs, #/jobs/ID, #/submit.
// The visible view polls its one API resource every POLL_MS while the tab
// is visible, backing off on errors; node names come from a cache filled by
// GET /v1/nodes and re-read only when a view meets an id it does not know.
// The admin token lives in sessionStorage and is sent only in the
// Authorization header.  Everything taken from the API (node names,
// regions, job names are user input) reaches the page through textContent
// and setAttribute, never as markup.
'use strict';

const POLL_MS = 5000;           // refresh period of the visible view
const MAX_BACKOFF_MS = 60000;   // longest wait between retries after errors
const TOKEN_KEY = 'shoal.admin_token';
const SVG_NS = 'http://www.w3.org/2000/svg';
const LIVE_JOB_STATES = ['pending', 'scheduled', 'running', 'recovering'];
// A running job may be scheduled too: the server re-plans it from its latest checkpoint.
const SCHEDULABLE_STATES = ['pending', 'scheduled', 'running', 'recovering'];

// ---------------------------------------------------------------- DOM helpers

// el('td', {class: 'num', dataset: {col: 'tflops'}}, 'text', child...): an
// element; strings become text nodes, null/false children are skipped.
function el(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// Replaces node's children the way el() adds them (null/false skipped).
function fill(node, ...children) {
  node.replaceChildren();
  return build(node, {}, children);
}

function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

function build(node, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'dataset') Object.assign(node.dataset, v);
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else if (k === 'text') node.textContent = String(v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// ----------------------------------------------------------------- formatting

function fmtNum(v, digits = 3) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '—';
  if (v !== 0 && (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-3)) return v.toExponential(2);
  return Number(v.toPrecision(digits)).toString();
}

// Seconds with a unit that keeps three significant digits readable.
function fmtSeconds(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return '—';
  if (s === 0) return '0 s';
  if (s < 1e-3) return fmtNum(s * 1e6) + ' µs';
  if (s < 1) return fmtNum(s * 1e3) + ' ms';
  return fmtNum(s) + ' s';
}

function fmtBytes(b) {
  if (!b) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return fmtNum(b) + ' ' + units[i];
}

function fmtCount(n) {
  return n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US');
}

function fmtAgo(iso) {
  if (!iso) return '—';
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.round(s) + ' s ago';
  if (s < 3600) return Math.round(s / 60) + ' min ago';
  if (s < 86400) return fmtNum(s / 3600, 2) + ' h ago';
  return fmtNum(s / 86400, 2) + ' d ago';
}

function fmtTime(iso) {
  return iso ? new Date(iso).toLocaleString() : '';
}

// "nice" axis ticks over [lo, hi], about `n` of them.
function ticks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

// Viridis, dark (0) to bright (1); brighter is better on every heat scale here.
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function viridis(t) {
  t = Math.min(1, Math.max(0, t));
  const x = t * (VIRIDIS.length - 1), i = Math.min(VIRIDIS.length - 2, Math.floor(x)), f = x - i;
  const c = VIRIDIS[i].map((a, k) => Math.round(a + (VIRIDIS[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function badge(state) {
  return el('span', { class: 'badge state-' + state, dataset: { state } }, state);
}

// ------------------------------------------------------------------ the token

const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (t) => sessionStorage.setItem(TOKEN_KEY, t),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

// --------------------------------------------------------------------- the API

class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;   // 0: the server did not answer
    this.code = code;
    this.field = field || null;
  }
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  const t = token.get();
  if (t) headers.Authorization = 'Bearer ' + t;
  const init = { method, headers, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, 'unreachable', 'the server cannot be reached');
  }
  let data = null;
  try {
    data = await resp.json();
  } catch (e) {
    if (resp.ok) throw new ApiError(resp.status, 'bad_response', 'the server sent something that is not JSON');
  }
  if (!resp.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(resp.status, err.code || 'http_' + resp.status, err.message || resp.statusText, err.field);
  }
  return data;
}

// Node id -> node, for names and regions wherever a view shows ids.
const nodeCache = new Map();

function cacheNodes(nodes) {
  for (const n of nodes) nodeCache.set(n.id, n);
}

// Fetches the fleet once if any of `ids` is unknown.
async function ensureNodes(ids) {
  if (ids.every((id) => nodeCache.has(id))) return;
  cacheNodes((await api('GET', '/v1/nodes')).nodes);
}

function nodeName(id) {
  const n = nodeCache.get(id);
  return n ? n.name : 'node ' + id;
}

function nodeLabel(id) {
  const n = nodeCache.get(id);
  return n && n.region ? `${n.name} (${n.region})` : nodeName(id);
}

// ------------------------------------------------------------- status, banner

const ui = {};

function setStatus(text, cls) {
  ui.status.textContent = text;
  ui.status.className = 'status' + (cls ? ' ' + cls : '');
}

function showBanner(text) {
  ui.banner.textContent = text;
  ui.banner.hidden = !text;
}

function showLogin(reason) {
  ui.login.hidden = false;
  ui.view.hidden = true;
  ui.forget.hidden = true;
  ui.loginReason.textContent = reason;
  ui.loginToken.value = '';
  ui.loginToken.focus();
  showBanner('');
  setStatus('');
}

function hideLogin() {
  ui.login.hidden = true;
  ui.view.hidden = false;
  ui.forget.hidden = false;
}

// --------------------------------------------------------------------- polling
//
// One loop for the visible view: refresh, then wait POLL_MS (or longer after
// errors, doubling up to MAX_BACKOFF_MS) and repeat; nothing runs while the
// tab is hidden, and a tab that becomes visible refreshes at once.

// running: a refresh of generation `gen` is in flight; again: refresh once
// more as soon as it ends (an action changed something meanwhile).
const poller = { view: null, timer: null, running: false, again: false, failures: 0, gen: 0 };

function pollStart(view) {
  pollStop();
  ui.view.classList.remove('stale');
  poller.view = view;
  poller.failures = 0;
  poller.running = false;   // a refresh of the last view may still be in flight; its answer is dropped
  poller.again = false;
  poller.gen++;
  if (view.refresh) pollTick(poller.gen);
}

function pollStop() {
  clearTimeout(poller.timer);
  poller.timer = null;
  poller.view = null;
}

// Refreshes the current view now (after an action changed something).
function pollNow() {
  if (!poller.view || !poller.view.refresh) return;
  clearTimeout(poller.timer);
  poller.timer = null;
  pollTick(poller.gen);
}

async function pollTick(gen) {
  if (gen !== poller.gen || document.visibilityState !== 'visible') return;
  if (poller.running) {
    poller.again = true;
    return;
  }
  const view = poller.view;
  poller.running = true;
  poller.timer = null;
  let delay = POLL_MS;
  try {
    await view.refresh();
    if (gen !== poller.gen) return;
    poller.failures = 0;
    ui.view.classList.remove('stale');
    showBanner('');
    setStatus('updated ' + new Date().toLocaleTimeString(), 'fresh');
  } catch (e) {
    if (gen !== poller.gen) return;
    if (e.status === 401) {
      token.clear();
      pollStop();
      showLogin('The server did not accept the admin token (401). Enter it again.');
      return;
    }
    poller.failures++;
    ui.view.classList.add('stale');
    delay = Math.min(MAX_BACKOFF_MS, POLL_MS * Math.pow(2, poller.failures));
    if (e.status === 0) {
      showBanner(`The server cannot be reached; retrying in ${Math.round(delay / 1000)} s.`);
      setStatus('offline', 'bad');
    } else {
      showBanner(`The server answered ${e.status} (${e.code}): ${e.message}. Retrying in ${Math.round(delay / 1000)} s.`);
      setStatus('error', 'bad');
    }
  } finally {
    if (gen === poller.gen) poller.running = false;
  }
  if (gen === poller.gen && document.visibilityState === 'visible') {
    if (poller.again && poller.failures === 0) delay = 0;
    poller.again = false;
    poller.timer = setTimeout(() => pollTick(gen), delay);
  }
}

document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') {
    if (poller.view && !poller.timer && !poller.running) pollTick(poller.gen);
  } else {
    clearTimeout(poller.timer);
    poller.timer = null;
  }
});

// Reports a failed action (a form's request) without stopping the poller.
function actionError(box, e) {
  if (e.status === 401) {
    token.clear();
    pollStop();
    showLogin('The server did not accept the admin token (401). Enter it again.');
    return;
  }
  fill(box, el('div', { class: 'error', role: 'alert' },
    e.status ? `${e.status} ${e.code}: ${e.message}` : 'The server cannot be reached.'));
}

// ------------------------------------------------------------------ the fleet

function viewFleet(root) {
  const summary = el('div', { class: 'cards' });
  const table = el('div', { class: 'table-wrap' });
  root.append(el('h1', {}, 'Fleet'), summary, table);

  function gpuText(h) {
    if (h.gpu_count > 0) return `${h.gpu_count}× ${h.gpu_model || 'GPU'}`;
    return h.gpu_model || 'CPU only';
  }

  function roleCell(role) {
    if (!role) return el('td', { dataset: { col: 'role' } }, '—');
    return el('td', { dataset: { col: 'role', job: role.job_id, stage: role.stage, replica: role.replica } },
      el('a', { href: '#/jobs/' + Number(role.job_id) }, role.job_name),
      ` stage ${role.stage} · replica ${role.replica}`);
  }

  return {
    async refresh() {
      const nodes = (await api('GET', '/v1/nodes')).nodes;
      cacheNodes(nodes);
      const by = (s) => nodes.filter((n) => n.state === s).length;
      const live = nodes.filter((n) => n.state === 'idle' || n.state === 'busy');
      const tflops = live.reduce((a, n) => a + n.hardware.tflops, 0);
      fill(summary,
        card('nodes', String(nodes.length), `${by('idle')} idle · ${by('busy')} busy · ${by('draining')} draining · ${by('lost')} lost`),
        card('TFLOP/s', fmtNum(tflops, 4), 'measured, idle and busy nodes'),
        card('in jobs', String(nodes.filter((n) => n.role).length), 'nodes holding a tasklet of a live plan'));
      const head = ['id', 'name', 'region', 'state', 'GPU', 'GPU memory', 'CPU cores', 'RAM', 'TFLOP/s',
        'last heartbeat', 'current role', 'peer address'];
      const rows = nodes.map((n) => el('tr', { dataset: { nodeId: n.id } },
        el('td', { class: 'num', dataset: { col: 'id' } }, n.id),
        el('td', { dataset: { col: 'name' } }, n.name),
        el('td', { dataset: { col: 'region' } }, n.region || '—'),
        stateCell(n),
        el('td', { dataset: { col: 'gpu' } }, gpuText(n.hardware)),
        el('td', { class: 'num', dataset: { col: 'gpu_memory' } }, fmtBytes(n.hardware.gpu_memory_bytes)),
        el('td', { class: 'num', dataset: { col: 'cpu_cores' } }, n.hardware.cpu_cores),
        el('td', { class: 'num', dataset: { col: 'ram' } }, fmtBytes(n.hardware.ram_bytes)),
        el('td', { class: 'num', dataset: { col: 'tflops' } }, fmtNum(n.hardware.tflops, 4)),
        el('td', { dataset: { col: 'heartbeat' }, title: fmtTime(n.last_heartbeat_at) }, fmtAgo(n.last_heartbeat_at)),
        roleCell(n.role),
        peerCell(n)));
      fill(table, nodes.length
        ? el('table', { id: 'fleet-table' }, el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))),
          el('tbody', {}, rows))
        : el('p', { class: 'empty' }, 'No node has registered yet. Start shoal-agent with the join token.'));
    },
  };
}

// The node's state, marked while its own disk refuses its checkpoints (it
// trains on; the job's checkpoint_error names it too).
function stateCell(n) {
  const mark = n.upload_error
    ? el('span', { class: 'badge unreachable', title: n.upload_error, dataset: { uploadFault: 'true' } }, 'checkpoints failing')
    : null;
  return el('td', { dataset: { col: 'state' } }, badge(n.state), mark ? ' ' : null, mark);
}

// The peer address, marked when the server cannot reach it from outside:
// such a node accepts no connections from agents beyond its network.
function peerCell(n) {
  const r = n.reachable || {};
  const mark = r.from_server === false
    ? el('span', { class: 'badge unreachable', title: r.why || '', dataset: { reachable: 'false' } }, 'unreachable')
    : null;
  return el('td', { class: 'mono', dataset: { col: 'peer' } }, n.peer_address, mark ? ' ' : null, mark);
}

function card(label, value, note) {
  return el('div', { class: 'card', dataset: { card: label } },
    el('div', { class: 'card-label' }, label),
    el('div', { class: 'card-value' }, value),
    note ? el('div', { class: 'card-note' }, note) : null);
}

// --------------------------------------------------------------- the network

function viewNetwork(root) {
  let metric = sessionStorage.getItem('shoal.network_metric') === 'latency' ? 'latency' : 'bandwidth';
  let last = null;
  const picker = el('div', { class: 'segmented', role: 'radiogroup' });
  const chart = el('div', { class: 'heatmap-wrap' });
  const info = el('p', { id: 'heat-info', class: 'hover-info' }, 'Hover over a cell for its numbers.');
  root.append(el('h1', {}, 'Network'),
    el('p', { class: 'lede' }, 'The latest measured link from each row\'s node to each column\'s node. ' +
      'Links are directional: A→B need not equal B→A. A link its agent could not connect is unreachable: ' +
      'a plan has the other end dial it, or joins the two through the relay.'),
    picker, chart, info);

  function drawPicker() {
    fill(picker, ...[['bandwidth', 'Bandwidth (Gbit/s)'], ['latency', 'Latency (ms)']].map(([m, label]) =>
      el('button', { type: 'button', role: 'radio', 'aria-checked': String(m === metric), dataset: { metric: m },
        class: m === metric ? 'on' : null,
        on: { click: () => { metric = m; sessionStorage.setItem('shoal.network_metric', m); drawPicker(); if (last) draw(last); } } },
      label)));
  }

  function draw(links) {
    const ids = links.nodes, n = ids.length;
    if (n === 0) {
      fill(chart, el('p', { class: 'empty' }, 'No nodes yet.'));
      return;
    }
    const values = metric === 'bandwidth' ? links.bandwidth_gbps : links.latency_ms;
    const unit = metric === 'bandwidth' ? 'Gbit/s' : 'ms';
    const present = values.flat().filter((v, k) => v !== null && v > 0 && Math.floor(k / n) !== k % n);
    const lo = present.length ? Math.min(...present) : 1, hi = present.length ? Math.max(...present) : 1;
    // Log scale: links span orders of magnitude (0.01 to 100 Gbit/s).
    const scale = (v) => (hi > lo ? Math.log(v / lo) / Math.log(hi / lo) : 1);
    const goodness = (v) => (metric === 'bandwidth' ? scale(v) : 1 - scale(v));
    const cell = Math.max(10, Math.min(60, Math.floor(720 / n)));
    const labels = ids.map(nodeLabel);
    const short = labels.map((s) => (s.length > 28 ? s.slice(0, 27) + '…' : s));
    const longest = Math.max(...short.map((s) => s.length));
    const labelW = 16 + 7 * longest;              // px; about 7 px a character at 12 px
    const top = 12 + Math.ceil(5 * longest);      // rotated by 45 degrees: 7 px * cos 45
    const W = labelW + n * cell + top, H = top + n * cell + 10;
    const g = svg('svg', { id: 'heatmap', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img',
      'aria-label': `${metric} matrix of ${n} nodes`, dataset: { metric, nodes: n } });
    ids.forEach((id, i) => {
      g.append(svg('text', { x: labelW - 8, y: top + i * cell + cell / 2, class: 'axis-label row-label',
        'text-anchor': 'end', 'dominant-baseline': 'middle' }, svg('title', {}, labels[i]), short[i]));
      const cx = labelW + i * cell + cell / 2;
      g.append(svg('text', { x: cx, y: top - 8, class: 'axis-label col-label',
        transform: `rotate(-45 ${cx} ${top - 8})` }, svg('title', {}, labels[i]), short[i]));
    });
    g.append(svg('text', { x: labelW - 8, y: top - 8, 'text-anchor': 'end', class: 'axis-title' }, 'from ↓  to →'));
    const showText = cell >= 40;
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) {
        const v = values[i][j];
        const x = labelW + j * cell, y = top + i * cell;
        const from = labels[i], to = labels[j];
        let fill, title, text = '', cls = 'cell';
        const reach = links.reachable ? links.reachable[i][j] : null;
        if (i === j) {
          fill = '#e9ecef'; title = `${from}: itself`; cls += ' self';
        } else if (reach === false) {
          // its agent tried and could not connect: not a link to measure
          const back = links.reachable[j][i] === false;
          fill = '#f5d5d5'; cls += ' unreachable'; text = '✕';
          title = `${from} → ${to}: unreachable (${from}'s agent could not connect)` + (back
            ? '; nor the other way: only a relay (shoal-server --relay) joins them'
            : `; a plan turns it: ${to} dials ${from}`);
        } else if (v === null) {
          fill = '#f8f9fa'; title = `${from} → ${to}: not measured`; cls += ' missing'; text = '·';
        } else {
          const t = goodness(v);
          fill = viridis(t);
          const other = metric === 'bandwidth' ? links.latency_ms[i][j] : links.bandwidth_gbps[i][j];
          title = `${from} → ${to}: ${fmtNum(v, 4)} ${unit}` +
            (metric === 'bandwidth' ? `, ${fmtNum(other, 4)} ms` : `, ${fmtNum(other, 4)} Gbit/s`) +
            `, measured ${fmtAgo(links.measured_at[i][j])}`;
          text = fmtNum(v, 3);
          cls += t > 0.6 ? ' light' : ' dark';
        }
        const r = svg('g', { class: cls, dataset: { from: ids[i], to: ids[j], value: v === null || reach === false ? '' : v,
          reach: reach === null ? '' : String(reach) },
          on: { mouseenter: () => { info.textContent = title; } } },
        svg('title', {}, title),
        svg('rect', { x: x + 1, y: y + 1, width: cell - 2, height: cell - 2, rx: 3, fill }),
        showText && text ? svg('text', { x: x + cell / 2, y: y + cell / 2, 'text-anchor': 'middle',
          'dominant-baseline': 'central', class: 'cell-text' }, text) : null);
        g.append(r);
      }
    }
    const legend = el('div', { class: 'legend' },
      el('span', {}, metric === 'bandwidth' ? `${fmtNum(lo, 3)} ${unit} (slowest)` : `${fmtNum(hi, 3)} ${unit} (slowest)`),
      el('span', { class: 'ramp' }),
      el('span', {}, metric === 'bandwidth' ? `${fmtNum(hi, 3)} ${unit} (fastest)` : `${fmtNum(lo, 3)} ${unit} (fastest)`),
      el('span', { class: 'swatch missing' }), el('span', {}, 'not measured'),
      el('span', { class: 'swatch unreachable' }), el('span', {}, 'unreachable (its agent could not connect)'));
    fill(chart, legend, g);
  }

  drawPicker();
  return {
    async refresh() {
      const links = await api('GET', '/v1/links');
      await ensureNodes(links.nodes);
      last = links;
      draw(links);
    },
  };
}

// ------------------------------------------------------------------ the jobs

function jobProgress(job) {
  const steps = job.spec.training.steps;
  const done = job.latest_step === null ? 0 : job.latest_step;
  const frac = steps > 0 ? Math.min(1, done / steps) : 0;
  const bar = el('div', { class: 'progress' }, el('div', { class: 'progress-fill' }));
  bar.firstChild.style.width = (100 * frac).toFixed(1) + '%';
  return el('div', { class: 'progress-cell', dataset: { done, steps } }, bar,
    el('span', { class: 'progress-text' }, `${fmtCount(done)} / ${fmtCount(steps)} steps`));
}

function viewJobs(root) {
  let filter = 'all';
  const picker = el('select', { id: 'job-filter', 'aria-label': 'which jobs',
    on: { change: () => { filter = picker.value; pollNow(); } } },
  el('option', { value: 'all' }, 'all jobs'), el('option', { value: 'live' }, 'live jobs'),
  ...['pending', 'scheduled', 'running', 'recovering', 'succeeded', 'failed', 'cancelled'].map((s) =>
    el('option', { value: s }, s)));
  picker.value = filter;
  const table = el('div', { class: 'table-wrap' });
  root.append(el('div', { class: 'title-row' }, el('h1', {}, 'Jobs'), picker,
    el('a', { class: 'button', href: '#/submit' }, 'Submit a job')), table);
  let all = [];

  function draw() {
    const jobs = all.filter((j) => filter === 'all' || (filter === 'live' ? LIVE_JOB_STATES.includes(j.state) : j.state === filter))
      .sort((a, b) => b.id - a.id);
    const head = ['id', 'name', 'state', 'stages × replicas', 'model', 'progress', 'created', 'updated'];
    fill(table, jobs.length
      ? el('table', { id: 'jobs-table' }, el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))),
        el('tbody', {}, jobs.map((j) => el('tr', { dataset: { jobId: j.id } },
          el('td', { class: 'num' }, j.id),
          el('td', { dataset: { col: 'name' } }, el('a', { href: '#/jobs/' + Number(j.id) }, j.name)),
          el('td', { dataset: { col: 'state' } }, badge(j.state)),
          el('td', { class: 'num' }, `${j.spec.parallelism.stages} × ${j.spec.parallelism.replicas}`),
          el('td', {}, modelText(j.spec.model)),
          el('td', { dataset: { col: 'progress' } }, jobProgress(j)),
          el('td', { title: fmtTime(j.created_at) }, fmtAgo(j.created_at)),
          el('td', { title: fmtTime(j.updated_at) }, fmtAgo(j.updated_at))))))
      : el('p', { class: 'empty' }, all.length ? 'No job matches.' : 'No jobs yet.'));
  }

  return {
    async refresh() {
      all = (await api('GET', '/v1/jobs')).jobs;
      draw();
    },
  };
}

// ---------------------------------------------------------------- job detail

// The plan as a stage x replica grid: rows are stages (pipeline order),
// columns replicas.  cells: [{stage, replica, node_id, layer_start,
// layer_end, note, straggler}]; a straggler's cell is marked.
function planGrid(cells, stages, replicas, id) {
  const at = new Map(cells.map((c) => [c.stage + ',' + c.replica, c]));
  const head = el('tr', {}, el('th', {}, 'stage'), el('th', {}, ''),
    Array.from({ length: replicas }, (_, r) => el('th', {}, 'replica ' + r)));
  const rows = Array.from({ length: stages }, (_, s) => {
    const first = at.get(s + ',0');
    return el('tr', {}, el('th', { class: 'num' }, s),
      el('td', { class: 'num' }, first ? layerRange(first) : ''),
      Array.from({ length: replicas }, (_, r) => {
        const c = at.get(s + ',' + r);
        if (!c) return el('td', { class: 'tasklet empty' }, '—');
        const n = nodeCache.get(c.node_id);
        return el('td', { class: 'tasklet' + (c.straggler ? ' straggler' : ''),
          dataset: { stage: s, replica: r, nodeId: c.node_id, straggler: c.straggler ? 'true' : 'false' } },
          el('div', { class: 'tasklet-node' }, nodeName(c.node_id)),
          el('div', { class: 'tasklet-meta' }, `#${c.node_id}` + (n && n.region ? ' · ' + n.region : '') +
            (n ? ' · ' + fmtNum(n.hardware.tflops, 3) + ' TFLOP/s' : '')),
          c.note ? el('div', { class: 'tasklet-meta' }, c.note) : null,
          c.straggler ? el('div', {}, el('span', { class: 'straggler-tag', title: 'compute far slower than ' +
            'predicted, next to this job\'s other tasklets' }, 'straggler')) : null);
      }));
  });
  return el('table', { class: 'plan-grid', id }, el('thead', {}, head), el('tbody', {}, rows));
}

// What a step of the plan sends, as its cost model priced it, with the
// tied head's exchange beside the stage links' and sync's.
function planBytes(b) {
  if (!b) return null;
  return el('p', { class: 'note', id: 'plan-bytes', dataset: { stageLinks: b.stage_links, sync: b.sync, tiedHead: b.tied_head } },
    `Sent per step (predicted): stage links ${fmtBytes(b.stage_links)} · sync ${fmtBytes(b.sync)}` +
    (b.tied_head ? ` · tied head ${fmtBytes(b.tied_head)}: the head shares the embedding, so its gradient ` +
      'crosses between the first and last stage of each replica every step (place them together, or untie it; ' +
      'docs/slow-links.md).' : '.'));
}

// Each connection of the plan and how it is made: dialled, turned (the
// other end dials, the sender cannot reach it) or through the relay.
// open: as the user left it (null: open when any link is not dialled).
function planLinks(p, open) {
  if (!p.links || !p.links.length) return null;
  const kinds = { stage: 'stage link', ring: 'ring (sync)', tied_head: 'tied head' };
  const end = (e) => `stage ${e.stage} replica ${e.replica} · ${nodeName(e.node_id)}`;
  const how = (l) => (l.way === 'relay' ? `relayed through ${p.relay || 'the relay'}`
    : l.way === 'reverse' ? `turned: ${nodeName(l.to.node_id)} dials` : 'dialled');
  const counts = ['dial', 'reverse', 'relay'].map((w) => [w, p.links.filter((l) => l.way === w).length]);
  const unusual = counts.some(([w, n]) => w !== 'dial' && n > 0);
  return el('details', { class: 'plan-links', open: (open === null ? unusual : open) ? '' : null },
    el('summary', { id: 'plan-links-summary' }, `${p.links.length} connections: ` +
      counts.map(([w, n]) => `${n} ${w === 'dial' ? 'dialled' : w === 'reverse' ? 'turned' : 'relayed'}`).join(', ') +
      (p.relay ? ` (relay ${p.relay})` : '')),
    el('div', { class: 'table-wrap' }, el('table', { id: 'plan-links', class: 'compact' },
      el('thead', {}, el('tr', {}, ...['link', 'from', 'to', 'how'].map((h) => el('th', {}, h)))),
      el('tbody', {}, p.links.map((l) => el('tr', { dataset: { kind: l.kind, way: l.way, from: l.from.node_id, to: l.to.node_id } },
        el('td', {}, kinds[l.kind] || l.kind), el('td', {}, end(l.from)), el('td', {}, end(l.to)),
        el('td', { dataset: { col: 'way' }, class: 'way-' + l.way }, how(l))))))));
}

// "layers 0-2" for {layer_start: 0, layer_end: 3}, first and last included,
// as the logs and messages write it (common/model.h, LAYER_RANGE); "" without one.
function layerRange(a) {
  if (!a) return '';
  return `layers ${a.layer_start}-${a.layer_end - 1}`;
}

// Stacked horizontal bars, one per row: rows [{label, parts: [seconds...]}]
// with `names` naming the parts; scaled to the longest row.
const PART_CLASSES = ['compute', 'comm', 'allreduce', 'bubble', 'other'];
function stackedBars(rows, names, id, W = 720, labelW = 170) {
  const barH = 22, gap = 10, right = 80;
  const max = Math.max(1e-12, ...rows.map((r) => r.parts.reduce((a, b) => a + Math.max(0, b), 0)));
  const H = rows.length * (barH + gap) + 4;
  const g = svg('svg', { id, class: 'bars', width: W, height: H, viewBox: `0 0 ${W} ${H}` });
  rows.forEach((row, i) => {
    const y = i * (barH + gap) + 2;
    const bar = svg('g', { class: 'bar', dataset: { row: i } });
    bar.append(svg('text', { x: labelW - 8, y: y + barH / 2, 'text-anchor': 'end', 'dominant-baseline': 'central',
      class: 'axis-label' }, row.label));
    let x = labelW, total = 0;
    row.parts.forEach((v, k) => {
      if (!(v > 0)) return;
      const w = (v / max) * (W - labelW - right);
      bar.append(svg('rect', { x, y, width: Math.max(0.5, w), height: barH, class: 'part ' + PART_CLASSES[k],
        dataset: { part: PART_CLASSES[k], seconds: v } }, svg('title', {}, `${row.label}: ${names[k]} ${fmtSeconds(v)}`)));
      x += w;
      total += v;
    });
    bar.append(svg('text', { x: x + 6, y: y + barH / 2, 'dominant-baseline': 'central', class: 'bar-total' },
      fmtSeconds(row.total !== undefined ? row.total : total)));
    g.append(bar);
  });
  return g;
}

function partsLegend(names) {
  return el('div', { class: 'legend' }, names.map((n, k) => [el('span', { class: 'swatch ' + PART_CLASSES[k] }), el('span', {}, n)]));
}

// The loss curves on one chart: training losses [[step, loss]...] as a
// line with a point per step (points drawn as circles up to 400 steps; the
// polyline has every step), and validation losses [[step, loss]...] (the
// job's fixed validation sequences, every eval_interval steps) as a second
// line with every point.
function lossChart(losses, vals = []) {
  const W = 960, H = 300, m = { l: 56, r: 16, t: 14, b: 40 };
  const g = svg('svg', { id: 'loss-chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': 'training and validation loss by step', dataset: { points: losses.length, valPoints: vals.length } });
  const all = losses.concat(vals);
  if (!all.length) return g;
  const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  const pad = (y1 - y0) * 0.08 || Math.abs(y0) * 0.05 || 1;
  y0 -= pad; y1 += pad;
  const X = (v) => m.l + ((v - x0) / (x1 - x0)) * (W - m.l - m.r);
  const Y = (v) => H - m.b - ((v - y0) / (y1 - y0)) * (H - m.t - m.b);
  const line = (pts) => pts.map((p) => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(' ');
  for (const t of ticks(y0, y1, 5)) {
    g.append(svg('line', { x1: m.l, x2: W - m.r, y1: Y(t), y2: Y(t), class: 'grid' }),
      svg('text', { x: m.l - 6, y: Y(t), 'text-anchor': 'end', 'dominant-baseline': 'middle', class: 'tick' }, fmtNum(t, 4)));
  }
  for (const t of ticks(x0, x1, 8).filter((v) => Number.isInteger(v))) {
    g.append(svg('line', { x1: X(t), x2: X(t), y1: H - m.b, y2: H - m.b + 4, class: 'axis' }),
      svg('text', { x: X(t), y: H - m.b + 16, 'text-anchor': 'middle', class: 'tick' }, fmtCount(t)));
  }
  g.append(svg('line', { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, class: 'axis' }),
    svg('line', { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, class: 'axis' }),
    svg('text', { x: (m.l + W - m.r) / 2, y: H - 6, 'text-anchor': 'middle', class: 'axis-title' }, 'step'),
    svg('text', { x: 14, y: (m.t + H - m.b) / 2, 'text-anchor': 'middle', class: 'axis-title',
      transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})` }, 'loss'));
  if (losses.length) g.append(svg('polyline', { class: 'loss-line', points: line(losses) }));
  if (vals.length) g.append(svg('polyline', { class: 'val-line', points: line(vals) }));
  if (losses.length <= 400) {
    for (const [s, l] of losses) {
      g.append(svg('circle', { cx: X(s), cy: Y(l), r: 3, class: 'loss-point', dataset: { step: s, loss: l } },
        svg('title', {}, `step ${s}: loss ${fmtNum(l, 5)}`)));
    }
  }
  for (const [s, l] of vals) {
    g.append(svg('rect', { x: X(s) - 4, y: Y(l) - 4, width: 8, height: 8, class: 'val-point', dataset: { step: s, loss: l } },
      svg('title', {}, `step ${s}: validation loss ${fmtNum(l, 5)}`)));
  }
  return g;
}

// What the job sends on its links: " · stage links bf16 · sync diloco
// (H=100, int8)"; "" for a job from before these options.
function commText(sp) {
  const c = sp.communication;
  if (!c) return '';
  return ` · stage links ${c.stage_link} · sync ${c.sync}` +
    (c.sync === 'diloco' ? ` (H=${c.inner_steps}, ${c.sync_dtype}, outer lr ${c.outer_learning_rate}, momentum ${c.outer_momentum})` : '');
}

function lossLegend() {
  return el('div', { id: 'loss-legend', class: 'legend' }, el('span', { class: 'swatch train' }), el('span', {}, 'training loss (the step\'s batch)'),
    el('span', { class: 'swatch val' }), el('span', {}, 'validation loss (the fixed validation sequences)'));
}

// Job-level measured numbers from the per-tasklet medians: the step takes
// as long as its slowest tasklet; components are means over tasklets;
// tokens/s = the tokens of one step (per replica, its largest count over
// stages) over that step time.
function measuredSummary(measured) {
  if (!measured.length) return null;
  const mean = (f) => measured.reduce((a, t) => a + f(t), 0) / measured.length;
  const iteration = Math.max(...measured.map((t) => t.iteration_s));
  const perReplica = new Map();
  for (const t of measured) perReplica.set(t.replica, Math.max(perReplica.get(t.replica) || 0, t.tokens));
  const tokens = [...perReplica.values()].reduce((a, b) => a + b, 0);
  return {
    iteration,
    compute: mean((t) => t.compute_s),
    comm: mean((t) => t.send_s + t.recv_wait_s),
    allreduce: mean((t) => t.allreduce_s),
    bubble: mean((t) => t.bubble_s),
    tokensPerS: iteration > 0 ? tokens / iteration : null,
  };
}

function viewJob(root, id) {
  const head = el('div', { class: 'title-row' });
  const cards = el('div', { class: 'cards' });
  const failure = el('div');
  const planBox = el('section', { class: 'panel' });
  const timeBox = el('section', { class: 'panel' });
  const stageBox = el('section', { class: 'panel' });
  const lossBox = el('section', { class: 'panel' });
  const scheduleBox = el('section', { class: 'panel', hidden: true });
  const faultBox = el('section', { class: 'panel', hidden: true });
  root.append(head, failure, cards, scheduleBox,
    el('div', { class: 'two-col' }, planBox, timeBox), lossBox, stageBox, faultBox);
  let scheduleForm = null;

  async function cancel(job) {
    if (!window.confirm(`Cancel job ${job.id} (${job.name})?`)) return;
    try {
      await api('DELETE', '/v1/jobs/' + Number(job.id));
      pollNow();
    } catch (e) {
      actionError(failure, e);
    }
  }

  function drawPlan(job) {
    const p = job.plan;
    const P = job.spec.parallelism.stages, D = job.spec.parallelism.replicas;
    if (!p) {
      fill(planBox, el('h2', {}, 'Plan'), el('p', { class: 'empty' }, 'Not scheduled yet.'));
      return;
    }
    // A re-plan short of nodes trains fewer replicas, each more micro-batches.
    const fewer = p.replicas < D ? ` Too few nodes: ${p.replicas} of its ${D} replicas, ` +
      `${p.micro_batches} micro-batches each, the same global batch.` : '';
    const measured = new Map(job.measured.map((t) => [t.stage + ',' + t.replica, t]));
    const cells = p.assignments.map((a) => {
      const t = measured.get(a.stage + ',' + a.replica);
      const note = !t ? '' : `step ${fmtSeconds(t.iteration_s)} (median)` +
        (t.slowdown !== null ? ` · compute ${fmtNum(t.slowdown, 3)}× predicted` : '');
      return Object.assign({}, a, { note, straggler: !!(t && t.straggler) });
    });
    // Stragglers: compute far slower than predicted next to the job's
    // other tasklets (the server's rule, docs/recovery.md).
    const stragglers = job.stragglers.map((t) =>
      `stage ${t.stage} replica ${t.replica} on ${nodeName(t.node_id)} computes ${fmtNum(t.slowdown, 3)}× its predicted time`);
    const shown = planBox.querySelector('details.plan-links');   // a refresh keeps it as the user left it
    const linksOpen = shown ? shown.open : null;
    fill(planBox, el('h2', {}, `Plan, epoch ${p.epoch}`),
      el('p', { class: 'lede' }, `Cost model ${p.cost_model}, made ${fmtAgo(p.created_at)}. ` +
        'Rows are pipeline stages, columns data-parallel replicas.' + fewer),
      el('div', { class: 'table-wrap' }, planGrid(cells, P, D, 'plan-grid')),
      planBytes(p.bytes_per_step),
      planLinks(p, linksOpen),
      stragglers.length ? el('p', { class: 'stragglers', id: 'stragglers', dataset: { count: stragglers.length } },
        `Straggling: ${stragglers.join('; ')}, far more than the job's other tasklets. ` +
        'Schedule re-plans the job from its latest checkpoint on the nodes live now.') : null);
  }

  function drawTimes(job) {
    const p = job.plan;
    const m = measuredSummary(job.measured);
    if (!p) {
      fill(timeBox, el('h2', {}, 'Iteration time'), el('p', { class: 'empty' }, 'No plan, no prediction.'));
      return;
    }
    const b = p.breakdown || {};
    const names = ['compute', 'communication', 'all-reduce', 'bubble', 'optimizer / other'];
    const rows = [
      ['iteration', b.total_s, m && m.iteration],
      ['compute', b.compute_s, m && m.compute],
      ['communication', b.comm_s, m && m.comm],
      ['all-reduce', b.dp_s, m && m.allreduce],
      ['bubble', b.bubble_s, m && m.bubble],
      ['optimizer', b.optimizer_s, null],
    ];
    const table = el('table', { id: 'time-table', class: 'compact' },
      el('thead', {}, el('tr', {}, el('th', {}, ''), el('th', {}, 'predicted'), el('th', {}, 'measured'))),
      el('tbody', {}, rows.map(([k, pv, mv]) => el('tr', { dataset: { row: k } }, el('th', {}, k),
        el('td', { class: 'num', dataset: { col: 'predicted' } }, fmtSeconds(pv)),
        el('td', { class: 'num', dataset: { col: 'measured' } }, m ? fmtSeconds(mv) : '—')))));
    const bars = [{ label: 'predicted', parts: [b.compute_s, b.comm_s, b.dp_s, b.bubble_s, b.optimizer_s], total: b.total_s }];
    if (m) {
      const other = m.iteration - (m.compute + m.comm + m.allreduce + m.bubble);
      bars.push({ label: 'measured', parts: [m.compute, m.comm, m.allreduce, m.bubble, Math.max(0, other)], total: m.iteration });
    }
    const base = p.baselines || {};
    fill(timeBox, el('h2', {}, 'Iteration time'),
      el('p', { class: 'lede' }, p.cost_model === 'dtfm'
        ? 'The dtfm cost is the paper\'s communication model, in model-seconds, not a wall-time prediction.'
        : 'Predicted by the shoal cost model; measured: medians of the latest 20 steps (the slowest tasklet\'s ' +
          'iteration, components averaged over tasklets).'),
      table,
      stackedBars(bars, names, 'time-bars', 480, 80), partsLegend(names),
      base.sequential_s !== undefined ? el('p', { class: 'note' },
        `Baselines: sequential placement ${fmtSeconds(base.sequential_s)}, best of ${fmtCount(base.random_plans)} ` +
        `random plans ${fmtSeconds(base.best_random_s)}.`) : null);
  }

  function drawStages(job) {
    const P = job.spec.parallelism.stages;
    if (!job.measured.length) {
      fill(stageBox, el('h2', {}, 'Per stage'), el('p', { class: 'empty' }, 'No steps reported in this plan epoch yet.'));
      return;
    }
    const rows = [];
    const layers = new Map((job.plan ? job.plan.assignments : []).map((a) => [a.stage, a]));
    for (let s = 0; s < P; s++) {
      const ts = job.measured.filter((t) => t.stage === s).map((t) => Object.assign({ layers: layers.get(s) }, t));
      if (!ts.length) continue;
      const mean = (f) => ts.reduce((a, t) => a + f(t), 0) / ts.length;
      const it = mean((t) => t.iteration_s);
      const parts = [mean((t) => t.compute_s), mean((t) => t.send_s + t.recv_wait_s), mean((t) => t.allreduce_s),
        mean((t) => t.bubble_s)];
      parts.push(Math.max(0, it - parts.reduce((a, b) => a + b, 0)));
      rows.push({ label: `stage ${s} · ${layerRange(ts[0].layers)}`, parts, total: it });
    }
    const names = ['compute', 'communication (send + wait)', 'all-reduce', 'bubble', 'other'];
    fill(stageBox, el('h2', {}, 'Per stage'),
      el('p', { class: 'lede' }, 'Medians of each tasklet\'s latest 20 steps, averaged over the stage\'s replicas.'),
      stackedBars(rows, names, 'stage-bars'), partsLegend(names));
  }

  // Failure reports as the server judged them (docs/recovery.md, "Who
  // failed"), and the nodes left out of the next plan because of them.
  function drawFaults(job) {
    const excluded = LIVE_JOB_STATES.includes(job.state) ? job.excluded_nodes : [];
    faultBox.hidden = !job.faults.length && !excluded.length;
    if (faultBox.hidden) return;
    const who = (id) => (id === null ? '—' : nodeName(id));
    const rows = job.faults.map((f) => el('tr', { dataset: { epoch: f.epoch } },
      el('td', { class: 'num' }, String(f.epoch)),
      el('td', {}, `stage ${f.stage} replica ${f.replica}`),
      el('td', {}, who(f.reporter_node)), el('td', {}, who(f.suspect_node)),
      el('td', { dataset: { col: 'verdict' } }, f.verdict || 'not judged yet'),
      el('td', { dataset: { col: 'culprit' } }, who(f.culprit_node)),
      el('td', { class: 'wrap' }, f.judgement || f.reason)));
    fill(faultBox, el('h2', {}, 'Failures'),
      el('p', { class: 'lede' }, 'Each report names the neighbour it waited for; the server probes the plan\'s ' +
        'peer ports and blames a node, or the link between the two.'),
      el('div', { class: 'table-wrap' }, el('table', { id: 'fault-table', class: 'compact' },
        el('thead', {}, el('tr', {}, ...['epoch', 'tasklet', 'reported by', 'named', 'verdict', 'culprit', 'why']
          .map((h) => el('th', {}, h)))),
        el('tbody', {}, rows))),
      excluded.length ? el('p', { id: 'excluded', class: 'stragglers' },
        'Left out of the next plan: ' + excluded.map(nodeName).join(', ') + '.') : null);
  }

  function drawLoss(job) {
    const pr = job.progress;
    const losses = pr ? pr.losses : [];
    const vals = pr && pr.val_losses ? pr.val_losses : [];
    const lastLoss = losses.length ? losses[losses.length - 1] : null;
    const lastVal = vals.length ? vals[vals.length - 1] : null;
    fill(lossBox, el('h2', {}, 'Loss'),
      losses.length
        ? el('p', { id: 'loss-caption', class: 'lede', dataset: { points: losses.length, lastStep: lastLoss[0], lastLoss: lastLoss[1] } },
          `${fmtCount(losses.length)} steps with a loss; at step ${fmtCount(lastLoss[0])} the loss is ${fmtNum(lastLoss[1], 5)}.`)
        : el('p', { class: 'empty' }, 'No loss reported yet.'),
      lastVal
        ? el('p', { id: 'val-caption', class: 'lede', dataset: { points: vals.length, lastStep: lastVal[0], lastLoss: lastVal[1] } },
          `${fmtCount(vals.length)} validation ${vals.length === 1 ? 'pass' : 'passes'}; after step ${fmtCount(lastVal[0])} the validation loss is ${fmtNum(lastVal[1], 5)}.`)
        : null,
      losses.length || vals.length ? lossChart(losses, vals) : null,
      vals.length ? lossLegend() : null);
  }

  function drawCards(job) {
    const m = measuredSummary(job.measured);
    const pr = job.progress;
    fill(cards,
      el('div', { class: 'card wide', dataset: { card: 'progress' } }, el('div', { class: 'card-label' }, 'progress'), jobProgress(job)),
      card('loss', pr && pr.loss !== null ? fmtNum(pr.loss, 5) : '—', pr ? `step ${fmtCount(pr.step)}` : 'no step yet'),
      job.spec.validation
        ? card('validation loss', pr && pr.val_loss != null ? fmtNum(pr.val_loss, 5) : '—',
          pr && pr.val_step != null ? `after step ${fmtCount(pr.val_step)}` : `every ${fmtCount(job.spec.validation.eval_interval)} steps`)
        : null,
      job.traffic && job.traffic.steps
        ? card('sent per step', fmtBytes(job.traffic.stage_link_bytes_per_step + job.traffic.sync_bytes_per_step),
          `stage links ${fmtBytes(job.traffic.stage_link_bytes_per_step)} · sync ${fmtBytes(job.traffic.sync_bytes_per_step)}`)
        : null,
      card('tokens/s', m && m.tokensPerS !== null ? fmtNum(m.tokensPerS, 4) : '—', 'median of the latest 20 steps'),
      card('step time', m ? fmtSeconds(m.iteration) : '—',
        job.plan && job.plan.cost_model === 'shoal' ? 'predicted ' + fmtSeconds(job.plan.predicted_iteration_s) : 'measured'));
  }

  function drawHead(job) {
    const sp = job.spec;
    fill(head, el('h1', {}, job.name, ' ', el('span', { class: 'muted' }, '#' + job.id)), badge(job.state),
      el('span', { class: 'muted' }, `${sp.parallelism.stages} stages × ${sp.parallelism.replicas} replicas · ` +
        `${modelText(sp.model)} · ${sp.parallelism.micro_batches} micro-batches of ` +
        `${sp.parallelism.micro_batch_size} · ${sp.parallelism.schedule} · data ${sp.data.path} (${sp.data.format})` +
        commText(sp)),
      LIVE_JOB_STATES.includes(job.state)
        ? el('button', { type: 'button', class: 'danger', on: { click: () => cancel(job) } }, 'Cancel job') : null);
    const refused = job.state === 'pending' && job.schedule_refused;
    fill(failure, job.failure_reason ? el('div', { class: 'error' }, 'Failed: ' + job.failure_reason)
      : refused ? el('div', { class: 'error' }, 'Not scheduled: ' + job.schedule_refused.message)
        : job.recovery_waiting ? el('div', { class: 'error' }, 'Recovery waits: ' + job.recovery_waiting) : null);
  }

  return {
    async refresh() {
      let job;
      try {
        job = await api('GET', '/v1/jobs/' + id);
      } catch (e) {
        if (e.status !== 404) throw e;
        fill(head, el('h1', {}, `No job #${id}`));
        fill(failure, el('p', { class: 'empty' }, 'The server has no such job. ', el('a', { href: '#/jobs' }, 'All jobs')));
        return;
      }
      const ids = (job.plan ? job.plan.assignments.map((a) => a.node_id) : []).concat(job.excluded_nodes,
        job.faults.flatMap((f) => [f.reporter_node, f.suspect_node, f.culprit_node]).filter((x) => x !== null));
      await ensureNodes(ids);
      drawHead(job);
      drawCards(job);
      drawPlan(job);
      drawTimes(job);
      drawLoss(job);
      drawStages(job);
      drawFaults(job);
      // The form is built once, so a refresh never eats what is typed.
      const schedulable = SCHEDULABLE_STATES.includes(job.state);
      scheduleBox.hidden = !schedulable;
      if (schedulable && !scheduleForm) {
        scheduleForm = schedulePanel(job, () => pollNow());
        fill(scheduleBox, scheduleForm);
      }
      // A job with a plan is re-planned only now and then: its form goes
      // below what it is doing, and Schedule is not the page's main button.
      const planned = !!job.plan && job.state !== 'pending';
      if (planned) faultBox.after(scheduleBox); else cards.after(scheduleBox);
      scheduleBox.dataset.place = planned ? 'below' : 'above';
      if (scheduleForm) {
        scheduleForm.querySelector('#schedule-plan').classList.toggle('primary', !planned);
        scheduleForm.querySelector('h2').textContent = planned ? 'Re-plan' : 'Schedule';
      }
    },
  };
}

// The scheduling form for one job: options, "Preview (dry run)" and
// "Schedule".  onScheduled runs after a plan is stored.
function schedulePanel(job, onScheduled) {
  const f = {
    cost: el('select', { name: 'cost_model' }, el('option', { value: 'shoal' }, 'shoal (predicted wall time)'),
      el('option', { value: 'dtfm' }, 'dtfm (the paper\'s model)')),
    seed: el('input', { type: 'number', name: 'seed', min: 0, step: 1, value: 1 }),
    budget: el('input', { type: 'number', name: 'budget_ms', min: 10, max: 120000, step: 10, value: 2000 }),
    fill: el('input', { type: 'checkbox', name: 'fill' }),
    fillLat: el('input', { type: 'number', name: 'fill_latency_ms', min: 0, step: 'any', value: 100 }),
    fillBw: el('input', { type: 'number', name: 'fill_bandwidth_gbps', min: 0.000001, step: 'any', value: 0.1 }),
  };
  const fillToggle = () => { f.fillLat.disabled = f.fillBw.disabled = !f.fill.checked; };
  f.fill.addEventListener('change', fillToggle);
  fillToggle();
  const out = el('div', { class: 'preview', id: 'schedule-result' });
  const preview = el('button', { type: 'button', id: 'preview-plan' }, 'Preview (dry run)');
  const commit = el('button', { type: 'button', id: 'schedule-plan', class: 'primary' }, 'Schedule');

  function request(dryRun, replan) {
    const body = { cost_model: f.cost.value, seed: Number(f.seed.value), budget_ms: Number(f.budget.value), dry_run: dryRun };
    if (replan) body.replan = true;
    if (f.fill.checked) body.fill_missing_links = { latency_ms: Number(f.fillLat.value), bandwidth_gbps: Number(f.fillBw.value) };
    return body;
  }

  async function run(dryRun, replan) {
    preview.disabled = commit.disabled = true;
    fill(out, el('p', { class: 'muted' }, dryRun ? 'Searching for a plan…' : 'Scheduling…'));
    try {
      const r = await api('POST', `/v1/jobs/${Number(job.id)}/schedule`, request(dryRun, replan));
      await ensureNodes(r.stages.flatMap((s) => s.nodes));
      const cells = r.stages.flatMap((s) => s.nodes.map((node, rep) => ({ stage: s.stage, replica: rep, node_id: node,
        layer_start: s.layer_start, layer_end: s.layer_end })));
      const b = r.breakdown;
      fill(out,
        el('p', { class: dryRun ? 'note' : 'ok', id: dryRun ? 'preview-summary' : 'scheduled-summary' },
          dryRun ? 'Dry run: nothing is stored. ' : `Stored as plan epoch ${r.epoch}. `,
          `Predicted ${r.cost_model === 'dtfm' ? 'cost' : 'iteration'} ${fmtSeconds(r.predicted_iteration_s)}` +
          (r.cost_model === 'shoal' ? ` (compute ${fmtSeconds(b.compute_s)}, communication ${fmtSeconds(b.comm_s)}, ` +
            `all-reduce ${fmtSeconds(b.dp_s)}, bubble ${fmtSeconds(b.bubble_s)}, optimizer ${fmtSeconds(b.optimizer_s)})` : '') +
          `; sequential ${fmtSeconds(r.baselines.sequential_s)}, best of ${fmtCount(r.baselines.random_plans)} random ` +
          `${fmtSeconds(r.baselines.best_random_s)}; ${r.nodes_available} nodes available.`),
        el('div', { class: 'table-wrap' }, planGrid(cells, r.stages.length, job.spec.parallelism.replicas,
          dryRun ? 'preview-grid' : 'scheduled-grid')));
      if (!dryRun) onScheduled(r);
    } catch (e) {
      if (e.code === 'replan_required') {
        // a running job: say what a re-plan costs, and re-plan only when asked again
        const again = el('button', { type: 'button', id: 'replan-anyway', class: 'primary' }, 'Re-plan anyway');
        again.addEventListener('click', () => run(false, true));
        fill(out, el('div', { class: 'error', role: 'alert', id: 'replan-warning' }, e.message), again);
      } else {
        actionError(out, e);
      }
    } finally {
      preview.disabled = commit.disabled = false;
    }
  }
  preview.addEventListener('click', () => run(true));
  commit.addEventListener('click', () => run(false));

  return el('div', { class: 'schedule' }, el('h2', {}, 'Schedule'),
    el('p', { class: 'lede' }, 'Preview a plan over the live nodes and measured links, then store it. ' +
      'Scheduling again makes a new plan epoch; a job that has run starts it from its latest checkpoint ' +
      '(the steps since are trained again).'),
    el('div', { class: 'form-row' },
      el('label', {}, 'cost model', f.cost), el('label', {}, 'seed', f.seed), el('label', {}, 'search budget (ms)', f.budget)),
    el('div', { class: 'form-row' },
      el('label', { class: 'check' }, f.fill, 'fill unmeasured links with'),
      el('label', {}, 'latency (ms)', f.fillLat), el('label', {}, 'bandwidth (Gbit/s)', f.fillBw)),
    el('div', { class: 'buttons' }, preview, commit), out);
}

// ---------------------------------------------------------------- submitting

// A job's model in a few words: its family, depth and width, and for
// llama its query/kv heads, MLP width and a tied head.
function modelText(m) {
  const base = `${m.architecture || 'gpt2'} · ${m.layers} layers, d_model ${m.d_model}`;
  if (m.architecture !== 'llama') return base;
  return `${base}, ${m.heads}/${m.kv_heads} heads (q/kv), ffn ${m.ffn_dim}` + (m.tie_embeddings ? ', tied head' : '');
}

// Every field of the job form: [dotted path, label, kind, default, extra];
// extra.family: sent only when model.architecture is that family.
const JOB_FIELDS = [
  ['Job', [
    ['name', 'name', 'text', 'job', { maxlength: 63 }],
    ['checkpoint_interval', 'checkpoint interval (steps; 0: only at the end)', 'int', 100, { min: 0 }],
  ]],
  ['Model', [
    ['model.architecture', 'architecture', 'choice', 'gpt2', { choices: ['gpt2', 'llama'] }],
    ['model.vocab_size', 'vocabulary size', 'int', 256, { min: 2 }],
    ['model.context_length', 'context length (tokens)', 'int', 64, { min: 1 }],
    ['model.d_model', 'd_model (channels)', 'int', 64, { min: 1 }],
    ['model.heads', 'heads', 'int', 4, { min: 1 }],
    ['model.layers', 'layers', 'int', 4, { min: 1 }],
    ['model.kv_heads', 'key/value heads (llama)', 'int', 2, { min: 1, family: 'llama' }],
    ['model.ffn_dim', 'SwiGLU width (llama)', 'int', 172, { min: 1, family: 'llama' }],
    ['model.rope_theta', 'rotary base (llama)', 'float', 10000, { min: 1, family: 'llama' }],
    ['model.tie_embeddings', 'head tied to the embedding (llama)', 'choice', 'false',
      { choices: ['false', 'true'], family: 'llama', bool: true }],
  ]],
  ['Parallelism', [
    ['parallelism.stages', 'pipeline stages', 'int', 2, { min: 1 }],
    ['parallelism.replicas', 'data-parallel replicas', 'int', 1, { min: 1 }],
    ['parallelism.micro_batches', 'micro-batches per step', 'int', 2, { min: 1 }],
    ['parallelism.micro_batch_size', 'sequences per micro-batch', 'int', 2, { min: 1 }],
    ['parallelism.schedule', 'pipeline schedule', 'choice', '1f1b', { choices: ['1f1b', 'gpipe'] }],
  ]],
  ['Training', [
    ['training.steps', 'steps', 'int', 100, { min: 1 }],
    ['training.learning_rate', 'peak learning rate', 'float', 0.001, { min: 0 }],
    ['training.warmup_steps', 'warm-up steps', 'int', 0, { min: 0 }],
    ['training.weight_decay', 'weight decay', 'float', 0, { min: 0 }],
    ['training.grad_clip', 'gradient clip (global norm; 0: off)', 'float', 1, { min: 0 }],
    ['training.seed', 'seed', 'int', 0, { min: 0 }],
  ]],
  ['Data', [
    ['data.path', 'absolute path on every agent', 'text', '/data/corpus.txt', { maxlength: 511 }],
    ['data.format', 'format', 'choice', 'text', { choices: ['text', 'llmc'] }],
  ]],
];

function viewSubmit(root) {
  const inputs = new Map();
  const msg = el('div', { id: 'submit-result' });
  const form = el('form', { id: 'job-form', novalidate: true });
  for (const [legend, fields] of JOB_FIELDS) {
    const fs = el('fieldset', {}, el('legend', {}, legend));
    for (const [path, label, kind, def, extra] of fields) {
      let input;
      if (kind === 'choice') {
        input = el('select', { name: path }, extra.choices.map((c) => el('option', { value: c }, c)));
        input.value = def;
      } else {
        input = el('input', { name: path, type: kind === 'text' ? 'text' : 'number', value: def,
          step: kind === 'float' ? 'any' : kind === 'int' ? 1 : null, min: extra.min, maxlength: extra.maxlength,
          required: true, spellcheck: 'false' });
      }
      inputs.set(path, { input, kind, extra });
      fs.append(el('label', { dataset: { field: path } }, label, input));
    }
    form.append(fs);
  }
  // A family's own fields show only while that family is chosen.
  const arch = inputs.get('model.architecture').input;
  const showFamily = () => {
    for (const [path, { extra }] of inputs)
      if (extra.family) form.querySelector(`label[data-field="${path}"]`).hidden = extra.family !== arch.value;
  };
  arch.addEventListener('change', showFamily);
  showFamily();
  const submit = el('button', { type: 'submit', class: 'primary', id: 'submit-job' }, 'Create job');
  form.append(el('div', { class: 'buttons' }, submit,
    el('span', { class: 'muted' }, 'The job is created pending; preview and schedule it next.')));
  root.append(el('h1', {}, 'Submit a job'), form, msg);

  function spec() {
    const out = {};
    const family = inputs.get('model.architecture').input.value;
    for (const [path, { input, kind, extra }] of inputs) {
      if (extra.family && extra.family !== family) continue;
      const v = extra.bool ? input.value === 'true'
        : kind === 'text' || kind === 'choice' ? input.value : Number(input.value);
      const keys = path.split('.');
      let o = out;
      for (const k of keys.slice(0, -1)) o = o[k] = o[k] || {};
      o[keys[keys.length - 1]] = v;
    }
    return out;
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    for (const { input } of inputs.values()) input.removeAttribute('aria-invalid');
    submit.disabled = true;
    try {
      const job = await api('POST', '/v1/jobs', spec());
      fill(msg,
        el('p', { class: 'ok', id: 'created' }, 'Created job ',
          el('a', { href: '#/jobs/' + Number(job.id) }, `${job.name} #${job.id}`), ' (pending).'),
        el('section', { class: 'panel' }, schedulePanel(job, () => { location.hash = '#/jobs/' + Number(job.id); })));
      msg.querySelector('#preview-plan').click();
    } catch (e) {
      actionError(msg, e);
      const bad = e.field && inputs.get(e.field);
      if (bad) {
        bad.input.setAttribute('aria-invalid', 'true');
        bad.input.focus();
      }
    } finally {
      submit.disabled = false;
    }
  });
  return {};
}

// ------------------------------------------------------------------- routing

const ROUTES = [
  [/^#\/fleet$/, 'fleet', () => viewFleet],
  [/^#\/network$/, 'network', () => viewNetwork],
  [/^#\/jobs$/, 'jobs', () => viewJobs],
  [/^#\/jobs\/([1-9][0-9]{0,17})$/, 'jobs', (m) => (root) => viewJob(root, m[1])],
  [/^#\/submit$/, 'submit', () => viewSubmit],
];

function route() {
  const hash = location.hash || '#/fleet';
  let found = null;
  for (const [re, name, make] of ROUTES) {
    const m = hash.match(re);
    if (m) { found = { name, view: make(m) }; break; }
  }
  if (!found) {
    location.replace('#/fleet');
    return;
  }
  for (const a of ui.nav.querySelectorAll('a')) a.classList.toggle('on', a.dataset.route === found.name);
  pollStop();
  showBanner('');
  if (!token.get()) {
    showLogin('Enter the admin token to read the fleet and jobs. It is kept in this tab\'s session ' +
      'storage only and sent in the Authorization header, never in a URL.');
    return;
  }
  hideLogin();
  const root = el('div', { class: 'page page-' + found.name });
  fill(ui.view, root);
  pollStart(found.view(root));
}

function init() {
  for (const id of ['view', 'status', 'banner', 'login', 'nav', 'forget']) ui[id] = document.getElementById(id);
  ui.loginReason = document.getElementById('login-reason');
  ui.loginToken = document.getElementById('login-token');
  document.getElementById('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = ui.loginToken.value.trim();
    if (!t) return;
    token.set(t);
    ui.loginToken.value = '';
    route();
  });
  ui.forget.addEventListener('click', () => {
    token.clear();
    route();
  });
  window.addEventListener('hashchange', route);
  route();
}

document.addEventListener('DOMContentLoaded', init);
