// The operator dashboard in a real browser: playwright-core driving the system chromium, axe-core
// for accessibility. Run by crates/payoutd/tests/dashboard.rs against a `payoutd serve` whose
// fixture it prepared; by hand:
//   BASE_URL=http://127.0.0.1:8080 OPERATOR_KEY=... SCREENSHOT_DIR=/tmp/shots \
//   AXE_PATH=.tools/node_modules/axe-core/axe.min.js FIXTURE='{"review_payout_id":"po_...",...}' \
//   node crates/payoutd/tests/browser/dashboard.mjs
// FIXTURE is JSON (or the path of a JSON file) with review_payout_id, xss_payout_id,
// attention_payout_id and incident_id; optionally reject_payout_id (a second held payout, rejected
// through the UI), payout_ids (every payout that exists, for the list and its pages) and
// xss_tx_hash (a transaction of the XSS payout, for the search).
// Prints one line per check ("ok   ..." or "FAIL ..."); exits 0 only when every check passed.

import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import fs from 'node:fs';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const workspace = path.resolve(here, '../../../..');
const toolsDir = process.env.PAYOUTD_TOOLS_DIR || path.join(workspace, '.tools');
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
/// The whole run: a stall is a failure, not a wait.
const RUN_TIMEOUT_MS = Number(process.env.DASHBOARD_RUN_TIMEOUT_MS || 240_000);
/// How long an approved payout may take to be paid on anvil (signing, a block, one confirmation).
const PAID_TIMEOUT_MS = Number(process.env.DASHBOARD_PAID_TIMEOUT_MS || 90_000);
const ACTION_TIMEOUT_MS = 10_000;
/// A decision shows in another browser within this (the pages refresh their live parts every 5 s).
const LIVE_TIMEOUT_MS = 20_000;
/// The explorer the test's configuration names for the chain.
const EXPLORER_TX = /^https:\/\/explorer\.invalid\/tx\/0x[0-9a-f]{64}$/;
const NAVIGATION_TIMEOUT_MS = 20_000;
const COOKIE_NAME = 'payoutd_dashboard';
const SESSION_MAX_AGE_S = 28_800;
const NAV_LINKS = [
  ['Overview', '/dashboard'],
  ['Payouts', '/dashboard/payouts'],
  ['Review queue', '/dashboard/review'],
  ['Needs attention', '/dashboard/attention'],
  ['Incidents', '/dashboard/incidents'],
  ['Audit log', '/dashboard/audit'],
];

function setupFailure(message) {
  console.log(`FAIL setup — ${message}`);
  process.exit(2);
}

function env(name) {
  const value = process.env[name];
  if (!value) setupFailure(`environment variable ${name} is required`);
  return value;
}

const BASE = env('BASE_URL').replace(/\/+$/, '');
const OPERATOR_KEY = env('OPERATOR_KEY');
const SCREENSHOT_DIR = env('SCREENSHOT_DIR');
const AXE_PATH = env('AXE_PATH');
const FIXTURE = (() => {
  const text = env('FIXTURE').trim();
  try {
    return JSON.parse(text.startsWith('{') ? text : fs.readFileSync(text, 'utf8'));
  } catch (e) {
    return setupFailure(`FIXTURE is neither JSON nor a readable JSON file: ${e.message}`);
  }
})();
for (const field of ['review_payout_id', 'xss_payout_id', 'attention_payout_id', 'incident_id']) {
  if (typeof FIXTURE[field] !== 'string' || !FIXTURE[field]) setupFailure(`FIXTURE.${field} is missing`);
}
if (!fs.existsSync(AXE_PATH)) setupFailure(`AXE_PATH ${AXE_PATH} does not exist: run scripts/install-tools`);
if (!fs.existsSync(CHROMIUM)) setupFailure(`no chromium at ${CHROMIUM}: run scripts/install-tools`);
let playwright;
try {
  playwright = createRequire(path.join(toolsDir, 'package.json'))('playwright-core');
} catch (e) {
  setupFailure(`playwright-core is not installed under ${toolsDir}: run scripts/install-tools (${e.message})`);
}
fs.mkdirSync(SCREENSHOT_DIR, { recursive: true });

// ---- checks -------------------------------------------------------------------------------------

const results = [];

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

/// Runs one check, prints its line; a failing check does not stop the others.
async function check(name, body) {
  try {
    const detail = await body();
    results.push({ name, ok: true });
    console.log(`ok   ${name}${typeof detail === 'string' && detail ? ` (${detail})` : ''}`);
    return true;
  } catch (e) {
    results.push({ name, ok: false });
    const message = String(e?.message ?? e).split('\n').slice(0, 6).join(' | ');
    console.log(`FAIL ${name} — ${message}`);
    return false;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pathOf = (url) => new URL(url, BASE).pathname;
const norm = (text) => (text ?? '').trim().toLowerCase().replace(/[\s-]+/g, '_');

function newPage(context) {
  return context.newPage().then((page) => {
    page.setDefaultTimeout(ACTION_TIMEOUT_MS);
    page.setDefaultNavigationTimeout(NAVIGATION_TIMEOUT_MS);
    // A dialog would mean script ran; dismiss it so nothing hangs, and remember it.
    page.on('dialog', (d) => {
      page.__dialogs = (page.__dialogs ?? 0) + 1;
      d.dismiss().catch(() => {});
    });
    return page;
  });
}

async function goto(page, urlPath) {
  const response = await page.goto(`${BASE}${urlPath}`, { waitUntil: 'load' });
  assert(response, `no response for ${urlPath}`);
  return response;
}

/// Submits a form by clicking `button`, returning the POST's own response (the 303 itself when it
/// redirects) after the navigation it causes has finished.
async function submitAndCapture(page, formAction, click) {
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST' && pathOf(r.url()) === formAction, { timeout: NAVIGATION_TIMEOUT_MS }),
    click(),
  ]);
  await page.waitForLoadState('load');
  return response;
}

async function signIn(page, key) {
  await goto(page, '/dashboard/login');
  await page.getByLabel('Operator key', { exact: true }).fill(key);
  return submitAndCapture(page, '/dashboard/login', () => page.getByRole('button', { name: 'Sign in' }).click());
}

/// The script policy of a Content-Security-Policy header: script-src, else default-src.
function scriptPolicy(csp) {
  const directives = Object.fromEntries(
    csp.split(';').map((d) => d.trim().split(/\s+/)).filter((d) => d[0]).map(([name, ...values]) => [name.toLowerCase(), values]),
  );
  return directives['script-src'] ?? directives['default-src'];
}

/// What every signed-in page shares: 200, the CSP, the navigation, the sign-out form, an h1 in main.
async function checkFrame(page, response, name) {
  const issues = [];
  if (response.status() !== 200) issues.push(`status ${response.status()}`);
  const csp = response.headers()['content-security-policy'];
  if (!csp) issues.push('no Content-Security-Policy header');
  else {
    const policy = scriptPolicy(csp);
    if (!policy) issues.push(`CSP has neither script-src nor default-src: ${csp}`);
    else if (policy.some((v) => v.toLowerCase() === "'unsafe-inline'")) issues.push(`CSP allows inline scripts: ${csp}`);
  }
  const nav = page.locator('nav[aria-label="Dashboard"]');
  if ((await nav.count()) !== 1) issues.push(`${await nav.count()} nav[aria-label=Dashboard]`);
  else {
    for (const [text, href] of NAV_LINKS) {
      const link = nav.getByRole('link', { name: text, exact: true });
      if ((await link.count()) < 1) issues.push(`nav link "${text}" missing`);
      else if (pathOf(await link.first().getAttribute('href')) !== href) issues.push(`nav link "${text}" goes to ${await link.first().getAttribute('href')}`);
    }
  }
  const signOut = page.locator('form#sign-out');
  if ((await signOut.count()) !== 1) issues.push('no form#sign-out');
  else {
    if (norm(await signOut.getAttribute('method')) !== 'post') issues.push('form#sign-out is not method=post');
    if (pathOf(await signOut.getAttribute('action') ?? '') !== '/dashboard/logout') issues.push('form#sign-out action is not /dashboard/logout');
    const csrf = signOut.locator('input[type=hidden][name=csrf]');
    if ((await csrf.count()) !== 1 || !(await csrf.inputValue())) issues.push('form#sign-out has no hidden csrf with a value');
  }
  const h1 = page.locator('main h1');
  if ((await h1.count()) < 1 || !(await h1.first().innerText()).trim()) issues.push('no h1 inside main');
  assert(issues.length === 0, `${name}: ${issues.join('; ')}`);
}

async function screenshot(page, name) {
  const file = path.join(SCREENSHOT_DIR, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return path.relative(process.cwd(), file);
}

/// axe-core on the page as it is now; fails on serious and critical violations, printing each.
async function axe(page, name) {
  await page.addScriptTag({ path: AXE_PATH });
  const result = await page.evaluate(async () => window.axe.run(document, { resultTypes: ['violations'] }));
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  for (const v of bad) {
    const targets = v.nodes.slice(0, 4).map((n) => n.target.join(' ')).join(', ');
    console.log(`     axe ${name}: ${v.impact} ${v.id}: ${v.help} [${targets}${v.nodes.length > 4 ? ', ...' : ''}] ${v.helpUrl}`);
  }
  const minor = result.violations.length - bad.length;
  assert(bad.length === 0, `${bad.length} serious or critical violation(s): ${bad.map((v) => v.id).join(', ')}`);
  return minor ? `${minor} minor or moderate violation(s) not counted` : 'no violations';
}

async function rowIds(page, selector, attribute) {
  return page.locator(selector).evaluateAll((rows, a) => rows.map((r) => r.getAttribute(a)), attribute);
}

async function statusOnDetail(page, id) {
  const response = await goto(page, `/dashboard/payouts/${id}`);
  assert(response.status() === 200, `GET /dashboard/payouts/${id}: ${response.status()}`);
  return norm(await page.locator('dl#payout dd[data-field=status]').innerText());
}

/// A confirmable action form's parts, as the contract gives them.
async function checkActionForm(form, action, button, extra = async () => []) {
  const issues = [];
  if ((await form.count()) !== 1) return [`${await form.count()} forms for ${action}`];
  if (norm(await form.getAttribute('method')) !== 'post') issues.push(`${action}: not method=post`);
  if (pathOf(await form.getAttribute('action') ?? '') !== action) issues.push(`action is ${await form.getAttribute('action')}, not ${action}`);
  const csrf = form.locator('input[type=hidden][name=csrf]');
  if ((await csrf.count()) !== 1 || !(await csrf.inputValue())) issues.push(`${action}: no hidden csrf with a value`);
  const confirm = form.locator('input[type=checkbox][name=confirm]');
  if ((await confirm.count()) !== 1) issues.push(`${action}: no checkbox confirm`);
  else {
    if ((await confirm.getAttribute('value')) !== 'yes') issues.push(`${action}: confirm value is not "yes"`);
    if ((await confirm.getAttribute('required')) === null) issues.push(`${action}: confirm is not required`);
    if ((await form.getByLabel('Confirm', { exact: true }).count()) !== 1) issues.push(`${action}: confirm is not labelled "Confirm"`);
  }
  if ((await form.getByRole('button', { name: button, exact: true }).count()) !== 1) issues.push(`${action}: no button "${button}"`);
  issues.push(...(await extra()));
  return issues;
}

// ---- the run ------------------------------------------------------------------------------------

const { review_payout_id: REVIEW, xss_payout_id: XSS, attention_payout_id: ATTENTION, incident_id: INCIDENT } = FIXTURE;
const REJECT = FIXTURE.reject_payout_id;
const ALL_PAYOUTS = Array.isArray(FIXTURE.payout_ids) ? FIXTURE.payout_ids : null;

const watchdog = setTimeout(() => {
  console.log(`FAIL run — did not finish within ${RUN_TIMEOUT_MS} ms`);
  process.exit(3);
}, RUN_TIMEOUT_MS);
watchdog.unref();

const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] }).catch((e) =>
  setupFailure(`chromium at ${CHROMIUM} does not start: ${e.message} (run scripts/install-tools)`),
);
const playwrightVersion = JSON.parse(fs.readFileSync(path.join(toolsDir, 'node_modules/playwright-core/package.json'), 'utf8')).version;
console.log(`browser: chromium ${browser.version()}, playwright-core ${playwrightVersion}, base ${BASE}`);
const anon = await playwright.request.newContext({ baseURL: BASE });

try {
  // 1. Without a session every page sends the browser to the sign-in page.
  await check('every /dashboard page without a session answers 303 to /dashboard/login', async () => {
    const bad = [];
    for (const p of ['/dashboard', '/dashboard/payouts', `/dashboard/payouts/${REVIEW}`, '/dashboard/review', '/dashboard/attention', '/dashboard/incidents', '/dashboard/audit']) {
      const r = await anon.get(p, { maxRedirects: 0 });
      const location = r.headers()['location'];
      if (r.status() !== 303 || !location || pathOf(location) !== '/dashboard/login') bad.push(`${p}: ${r.status()} ${location ?? ''}`);
    }
    assert(bad.length === 0, bad.join('; '));
  });

  // 2. Accessibility and screenshots, in a context that lets axe's script in past the CSP.
  const axeContext = await browser.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
  const a = await newPage(axeContext);
  await check('login page: form, labelled key field, Sign in button', async () => {
    const r = await goto(a, '/dashboard/login');
    assert(r.status() === 200, `status ${r.status()}`);
    const form = a.locator('form#login-form');
    assert((await form.count()) === 1, 'no form#login-form');
    assert(norm(await form.getAttribute('method')) === 'post', 'form#login-form is not method=post');
    assert(pathOf(await form.getAttribute('action') ?? '') === '/dashboard/login', 'form#login-form action is not /dashboard/login');
    const input = form.locator('input#operator_key[name=operator_key][type=password]');
    assert((await input.count()) === 1, 'no input#operator_key name=operator_key type=password');
    assert((await a.getByLabel('Operator key', { exact: true }).count()) === 1, 'the key field is not labelled "Operator key"');
    assert((await form.getByRole('button', { name: 'Sign in' }).count()) === 1, 'no button "Sign in"');
    const csp = r.headers()['content-security-policy'];
    assert(csp && scriptPolicy(csp) && !scriptPolicy(csp).includes("'unsafe-inline'"), `CSP: ${csp}`);
  });
  await check('screenshot login', () => screenshot(a, 'login'));
  await check('axe login', () => axe(a, 'login'));
  await check('sign in (accessibility context)', async () => {
    const r = await signIn(a, OPERATOR_KEY);
    assert(r.status() === 303 && pathOf(a.url()) === '/dashboard', `status ${r.status()}, now at ${a.url()}`);
  });

  const pages = [
    ['overview', '/dashboard', async () => {
      const issues = [];
      if ((await a.locator('main h1').first().innerText()).trim() !== 'Overview') issues.push('h1 is not "Overview"');
      if ((await a.locator('table#status-counts').count()) !== 1) issues.push('no table#status-counts');
      if ((await a.locator('svg#payouts-per-minute').count()) !== 1) issues.push('no svg#payouts-per-minute');
      if ((await a.locator('table#wallets tbody tr').count()) < 1) issues.push('no hot wallet row');
      if (!/\d+ deliveries/.test(await a.locator('#webhook-backlog').innerText())) issues.push('no webhook backlog count');
      return issues;
    }],
    ['payouts', '/dashboard/payouts', async () => {
      const issues = [];
      const form = a.locator('form#payout-filters');
      if ((await form.count()) !== 1) return ['no form#payout-filters'];
      if (norm(await form.getAttribute('method')) !== 'get') issues.push('form#payout-filters is not method=get');
      if ((await form.locator('select[name=status]').count()) !== 1) issues.push('no select status');
      for (const f of ['merchant', 'asset', 'key', 'destination', 'q']) {
        if ((await form.locator(`[name=${f}]`).count()) !== 1) issues.push(`no field ${f}`);
      }
      if ((await a.locator('table#payouts').count()) !== 1) return [...issues, 'no table#payouts'];
      const rows = a.locator('table#payouts tr[data-payout-id]');
      const ids = await rowIds(a, 'table#payouts tr[data-payout-id]', 'data-payout-id');
      if (ids.length === 0) issues.push('no payout rows');
      if (ids.some((id) => !id.startsWith('po_'))) issues.push(`row ids not po_...: ${ids.join(',')}`);
      const withStatus = await rows.evaluateAll((rs) => rs.filter((r) => r.querySelector('td.status')).length);
      if (withStatus !== ids.length) issues.push(`${ids.length - withStatus} row(s) without td.status`);
      return issues;
    }],
    ['payout', `/dashboard/payouts/${REVIEW}`, async () => {
      const issues = [];
      if (!(await a.locator('main h1').first().innerText()).includes(REVIEW)) issues.push('h1 does not contain the payout id');
      for (const s of ['dl#payout', 'dl#payout dd[data-field=status]', 'dl#payout dd[data-field=metadata]', 'table#attempts', 'ol#timeline']) {
        if ((await a.locator(s).count()) !== 1) issues.push(`no ${s}`);
      }
      return issues;
    }],
    ['review', '/dashboard/review', async () => {
      if ((await a.locator('table#review-queue').count()) !== 1) return ['no table#review-queue'];
      const issues = [];
      for (const id of [REVIEW, REJECT].filter(Boolean)) {
        const row = a.locator(`table#review-queue tr[data-payout-id="${id}"]`);
        if ((await row.count()) !== 1) { issues.push(`${id} is not in the queue`); continue; }
        issues.push(...(await checkActionForm(row.locator('form.approve'), `/dashboard/payouts/${id}/approve`, 'Approve')));
        issues.push(...(await checkActionForm(row.locator('form.reject'), `/dashboard/payouts/${id}/reject`, 'Reject')));
      }
      return issues;
    }],
    ['attention', '/dashboard/attention', async () => {
      const row = a.locator(`tr[data-payout-id="${ATTENTION}"]`);
      if ((await row.count()) !== 1) return [`${ATTENTION} is not listed`];
      const form = row.locator('form.resolve');
      return checkActionForm(form, `/dashboard/payouts/${ATTENTION}/resolve`, 'Resolve', async () => {
        const issues = [];
        const options = await form.locator('select[name=verdict] option').evaluateAll((os) => os.map((o) => o.value));
        for (const v of ['paid', 'failed', 'retry']) if (!options.includes(v)) issues.push(`verdict ${v} not offered (${options.join(',')})`);
        if ((await form.locator('textarea[name=evidence]').count()) !== 1) issues.push('no textarea evidence');
        return issues;
      });
    }],
    ['incidents', '/dashboard/incidents', async () => {
      const row = a.locator(`tr[data-incident-id="${INCIDENT}"]`);
      if ((await row.count()) !== 1) return [`${INCIDENT} is not listed`];
      const form = row.locator('form.resolve-incident');
      return checkActionForm(form, `/dashboard/incidents/${INCIDENT}/resolve`, 'Resolve', async () =>
        (await form.locator('textarea[name=resolution]').count()) === 1 ? [] : ['no textarea resolution']);
    }],
    ['audit', '/dashboard/audit', async () => ((await a.locator('table#audit-log').count()) === 1 ? [] : ['no table#audit-log'])],
    ['batches', '/dashboard/batches', async () => ((await a.locator('table#batches').count()) === 1 && (await a.locator('table#transfers').count()) === 1 ? [] : ['no table#batches or table#transfers'])],
    ['merchants', '/dashboard/merchants', async () => ((await a.locator(`section[data-merchant-id="${FIXTURE.merchant_id}"] table.balances`).count()) === 1 ? [] : ['no balances of the merchant'])],
    ['events', `/dashboard/events?merchant=${FIXTURE.merchant_id}`, async () => {
      const issues = [];
      if ((await a.locator('table#events tr[data-event-id]').count()) === 0) issues.push('no event rows');
      if ((await a.locator('table#events form.redispatch').count()) === 0) issues.push('no redispatch form');
      return issues;
    }],
  ];
  for (const [name, urlPath, specific] of pages) {
    let response = null;
    const loaded = await check(`${name} page loads (${urlPath})`, async () => {
      response = await goto(a, urlPath);
      assert(response.status() === 200, `status ${response.status()}`);
    });
    if (!loaded) continue;
    await check(`${name}: navigation, sign-out form, h1, CSP`, () => checkFrame(a, response, name));
    await check(`${name}: contract elements`, async () => {
      const issues = await specific();
      assert(issues.length === 0, issues.join('; '));
    });
    await check(`screenshot ${name}`, () => screenshot(a, name));
    await check(`axe ${name}`, () => axe(a, name));
  }

  await check('payouts list shows every payout once, following rel=next while there are more', async () => {
    if (!ALL_PAYOUTS) return 'FIXTURE.payout_ids not given: nothing to compare';
    const seen = new Set();
    let next = '/dashboard/payouts';
    let pages = 0;
    while (next) {
      assert(pages < 50, 'more than 50 pages');
      const r = await goto(a, next);
      pages += 1;
      assert(r.status() === 200, `${next}: ${r.status()}`);
      const ids = await rowIds(a, 'table#payouts tr[data-payout-id]', 'data-payout-id');
      assert(ids.length > 0, `page ${pages} (${next}) is empty: a rel=next link with nothing after it`);
      for (const id of ids) {
        assert(!seen.has(id), `${id} appears on two pages`);
        seen.add(id);
      }
      const link = a.locator('a[rel=next]');
      next = (await link.count()) > 0 ? (({ pathname, search }) => pathname + search)(new URL(await link.first().getAttribute('href'), a.url())) : null;
    }
    const missing = ALL_PAYOUTS.filter((id) => !seen.has(id));
    assert(missing.length === 0, `not listed on any of ${pages} page(s): ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', ...' : ''}`);
    const extra = [...seen].filter((id) => !ALL_PAYOUTS.includes(id));
    assert(extra.length === 0, `listed but not in the fixture: ${extra.join(', ')}`);
    return `${seen.size} payouts on ${pages} page(s)`;
  });
  // q finds one payout by its id or a transaction reference: the dashboard may list that payout
  // alone or go straight to its page; either way, that payout and nothing else.
  const searchFinds = async (q, id) => {
    await goto(a, '/dashboard/payouts');
    const field = a.locator('form#payout-filters [name=q]');
    await field.fill(q);
    await Promise.all([a.waitForURL((u) => u.searchParams.get('q') === q || u.pathname === `/dashboard/payouts/${id}`), field.press('Enter')]);
    await a.waitForLoadState('load');
    if (pathOf(a.url()) === `/dashboard/payouts/${id}`) {
      assert((await a.locator('main h1').first().innerText()).includes(id), `the payout page's h1 does not name ${id}`);
      return `went to /dashboard/payouts/${id}`;
    }
    const ids = await rowIds(a, 'table#payouts tr[data-payout-id]', 'data-payout-id');
    assert(ids.length === 1 && ids[0] === id, `at ${a.url()}, rows: ${ids.join(', ') || 'none'}`);
    return 'listed alone';
  };
  await check('payouts search: q = a payout id (typed into the form) finds that payout only', () => searchFinds(XSS, XSS));
  await check('payouts search: q = an id that does not exist lists nothing', async () => {
    const r = await goto(a, `/dashboard/payouts?q=${encodeURIComponent('po_00000000000000000000000000000000')}`);
    assert(r.status() < 500, `status ${r.status()}`);
    const ids = await rowIds(a, 'table#payouts tr[data-payout-id]', 'data-payout-id');
    const note = (await a.locator('main').innerText()).match(/Nothing[^\n]*/)?.[0] ?? '';
    assert(ids.length === 0, `a search that matches nothing still lists ${ids.length} payout(s) (${ids.slice(0, 2).join(', ')}, ...)${note ? `, under the note "${note}"` : ''}`);
  });
  if (FIXTURE.xss_tx_hash) {
    await check('payouts search: q = a transaction hash finds its payout', () => searchFinds(FIXTURE.xss_tx_hash, XSS));
  }
  await check('payouts filter: status=held_for_review lists held payouts only', async () => {
    await goto(a, '/dashboard/payouts?status=held_for_review');
    const statuses = await a.locator('table#payouts tr[data-payout-id] td.status').allInnerTexts();
    const ids = await rowIds(a, 'table#payouts tr[data-payout-id]', 'data-payout-id');
    assert(ids.includes(REVIEW), `${REVIEW} missing: ${ids.join(', ')}`);
    assert(statuses.every((s) => norm(s) === 'held_for_review'), `statuses: ${statuses.join(', ')}`);
    assert(!ids.includes(XSS), 'the XSS payout (not held) is listed');
  });
  await axeContext.close();

  // 3. Everything else in a normal context: the page's own CSP applies.
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await newPage(context);
  await check('a wrong operator key: 401 with role=alert, no session', async () => {
    const r = await signIn(page, 'not-the-operator-key-0123456789');
    assert(r.status() === 401, `status ${r.status()}`);
    assert((await page.locator('[role=alert]').count()) >= 1, 'no [role=alert]');
    assert(!(await context.cookies(`${BASE}/dashboard`)).some((c) => c.name === COOKIE_NAME), 'a session cookie was set');
  });
  await check('sign in: 303 to /dashboard with an HttpOnly, SameSite=Strict, Path=/dashboard, 8 h cookie', async () => {
    const r = await signIn(page, OPERATOR_KEY);
    assert(r.status() === 303, `status ${r.status()}`);
    assert(pathOf(r.headers()['location'] ?? '') === '/dashboard', `Location ${r.headers()['location']}`);
    assert(pathOf(page.url()) === '/dashboard', `now at ${page.url()}`);
    const raw = (await r.headerValue('set-cookie')) ?? '';
    const line = raw.split('\n').find((l) => l.startsWith(`${COOKIE_NAME}=`));
    assert(line, `no Set-Cookie ${COOKIE_NAME}: ${raw}`);
    const attrs = line.split(';').slice(1).map((s) => s.trim().toLowerCase());
    for (const want of ['httponly', 'samesite=strict', 'path=/dashboard', `max-age=${SESSION_MAX_AGE_S}`]) {
      assert(attrs.includes(want), `Set-Cookie lacks ${want}: ${line.replace(/=[^;]*/, '=<redacted>')}`);
    }
    const cookie = (await context.cookies(`${BASE}/dashboard`)).find((c) => c.name === COOKIE_NAME);
    assert(cookie && cookie.httpOnly && cookie.sameSite === 'Strict' && cookie.path === '/dashboard', `stored cookie ${JSON.stringify({ ...cookie, value: undefined })}`);
    const left = cookie.expires - Date.now() / 1000;
    assert(Math.abs(left - SESSION_MAX_AGE_S) < 120, `cookie expires in ${Math.round(left)} s`);
    return attrs.includes('secure') ? 'Secure set' : 'not Secure (plain http)';
  });
  await check('the session cookie is not readable from script', async () => {
    const visible = await page.evaluate(() => document.cookie);
    assert(!visible.includes(COOKIE_NAME), `document.cookie = ${visible}`);
  });

  // XSS: the merchant's metadata is shown as text, never run.
  await check('XSS: payout metadata is shown as text and never runs (page CSP enforced)', async () => {
    const r = await goto(page, `/dashboard/payouts/${XSS}`);
    assert(r.status() === 200, `status ${r.status()}`);
    await sleep(300); // an onerror on a broken image fires after load
    const xss = await page.evaluate(() => typeof window.__xss);
    assert(xss === 'undefined', `window.__xss is ${xss}: metadata ran as script`);
    const text = await page.locator('dl#payout dd[data-field=metadata]').innerText();
    assert(text.includes('<script>') && text.includes('onerror'), `metadata text does not show the payload literally: ${text.slice(0, 300)}`);
    assert((await page.locator('img[src="x"]').count()) === 0, 'an <img src=x> from the metadata is in the DOM');
    assert((await page.locator('main script').count()) === 0 || !(await page.locator('main script').allInnerTexts()).some((s) => s.includes('__xss')), 'the metadata script is in the DOM');
    assert(!page.__dialogs, 'a dialog opened');
    assert((await page.locator('main h1').first().innerText()).includes(XSS), 'h1 does not contain the payout id');
  });
  await check('XSS: the payouts list and the overview run nothing either', async () => {
    for (const p of ['/dashboard/payouts', `/dashboard/payouts?q=${XSS}`, '/dashboard']) {
      await goto(page, p);
      await sleep(200);
      assert((await page.evaluate(() => typeof window.__xss)) === 'undefined', `window.__xss set on ${p}`);
    }
  });

  // Forged and careless POSTs change nothing.
  const target = REJECT ?? REVIEW;
  const approveUrl = `/dashboard/payouts/${target}/approve`;
  let csrf = '';
  await check('read a csrf token from the review queue', async () => {
    await goto(page, '/dashboard/review');
    csrf = await page.locator(`tr[data-payout-id="${target}"] form.approve input[name=csrf]`).inputValue();
    assert(csrf, 'empty csrf');
  });
  await check('POST approve without a session: 401', async () => {
    const r = await anon.post(approveUrl, { form: { csrf, confirm: 'yes' }, maxRedirects: 0 });
    assert(r.status() === 401, `status ${r.status()}`);
  });
  await check('POST approve with the session and a wrong csrf: 403', async () => {
    const r = await page.request.post(`${BASE}${approveUrl}`, { form: { csrf: `forged-${csrf}`, confirm: 'yes' }, maxRedirects: 0 });
    assert(r.status() === 403, `status ${r.status()}`);
  });
  await check('POST approve with the session and no csrf: 403', async () => {
    const r = await page.request.post(`${BASE}${approveUrl}`, { form: { confirm: 'yes' }, maxRedirects: 0 });
    assert(r.status() === 403, `status ${r.status()}`);
  });
  await check('POST approve with the session and csrf but no confirm=yes: 400', async () => {
    const r = await page.request.post(`${BASE}${approveUrl}`, { form: { csrf }, maxRedirects: 0 });
    assert(r.status() === 400, `status ${r.status()}`);
  });
  await check(`the refused POSTs changed nothing: ${target} still held_for_review and queued`, async () => {
    const status = await statusOnDetail(page, target);
    assert(status === 'held_for_review', `status ${status}`);
    await goto(page, '/dashboard/review');
    assert((await page.locator(`table#review-queue tr[data-payout-id="${target}"]`).count()) === 1, 'gone from the queue');
  });

  // Operator actions through the UI.
  const act = async (listPath, rowSelector, formSelector, button, fill = async () => {}) => {
    await goto(page, listPath);
    const row = page.locator(rowSelector);
    assert((await row.count()) === 1, `${rowSelector} not on ${listPath}`);
    const form = row.locator(formSelector);
    const action = pathOf(await form.getAttribute('action'));
    await fill(form);
    await form.getByLabel('Confirm', { exact: true }).check();
    const r = await submitAndCapture(page, action, () => form.getByRole('button', { name: button, exact: true }).click());
    assert(r.status() === 303, `POST ${action}: ${r.status()} ${(await page.locator('main').innerText().catch(() => '')).slice(0, 200)}`);
    assert(pathOf(page.url()) === listPath, `303 to ${r.headers()['location']}, not ${listPath}`);
    assert((await page.locator(rowSelector).count()) === 0, `${rowSelector} still listed`);
  };
  // A second browser, signed in on its own, watches the review queue while the first decides.
  const otherContext = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const other = await newPage(otherContext);
  const watching = await check(`a second browser signs in and sees ${REVIEW} in its review queue`, async () => {
    const r = await signIn(other, OPERATOR_KEY);
    assert(r.status() === 303, `status ${r.status()}`);
    await goto(other, '/dashboard/review');
    assert((await other.locator(`table#review-queue tr[data-payout-id="${REVIEW}"]`).count()) === 1, `${REVIEW} not in its queue`);
    await other.evaluate(() => { window.__sameDocument = true; });
  });
  const approved = await check(`approve ${REVIEW} through the UI: 303 back to the queue, row gone`, () =>
    act('/dashboard/review', `table#review-queue tr[data-payout-id="${REVIEW}"]`, 'form.approve', 'Approve'));
  if (watching && approved) {
    await check('the approval shows in the second browser without a reload', async () => {
      const started = Date.now();
      await other.locator(`table#review-queue tr[data-payout-id="${REVIEW}"]`).waitFor({ state: 'detached', timeout: LIVE_TIMEOUT_MS });
      assert(await other.evaluate(() => window.__sameDocument === true), 'the second browser reloaded the page');
      return `${Date.now() - started} ms`;
    });
  }
  await otherContext.close().catch(() => {});
  if (REJECT) {
    await check(`reject ${REJECT} through the UI: 303 back to the queue, row gone, status rejected`, async () => {
      await act('/dashboard/review', `table#review-queue tr[data-payout-id="${REJECT}"]`, 'form.reject', 'Reject');
      const status = await statusOnDetail(page, REJECT);
      assert(status === 'rejected', `status ${status}`);
    });
  }
  let verdict = 'failed';
  await check(`resolve ${ATTENTION} (needs attention) through the UI: 303 back, row gone`, () =>
    act('/dashboard/attention', `tr[data-payout-id="${ATTENTION}"]`, 'form.resolve', 'Resolve', async (form) => {
      const offered = await form.locator('select[name=verdict] option').evaluateAll((os) => os.map((o) => o.value));
      if (!offered.includes('failed')) verdict = offered.find((v) => v) ?? 'failed';
      await form.locator('select[name=verdict]').selectOption(verdict);
      await form.locator('textarea[name=evidence]').fill('Browser test: the token transfer reverted in a final block, nothing moved.');
    }));
  await check(`${ATTENTION} is ${verdict} after the verdict`, async () => {
    const status = await statusOnDetail(page, ATTENTION);
    assert(status === verdict, `status ${status}`);
  });
  await check(`${ATTENTION}'s timeline: the reverted attempt with the chain's evidence, then the operator's verdict`, async () => {
    await statusOnDetail(page, ATTENTION);
    const timeline = await page.locator('ol#timeline').innerText();
    for (const words of ['created', 'needs attention', 'operator resolve', 'Browser test: the token transfer reverted']) {
      assert(timeline.includes(words), `timeline lacks "${words}": ${timeline.slice(0, 600)}`);
    }
    assert(/attempt 1 (reverted|dead): \S/.test(timeline), `no ended attempt with its evidence: ${timeline.slice(0, 600)}`);
  });
  await check(`resolve incident ${INCIDENT} through the UI: 303 back, row gone`, () =>
    act('/dashboard/incidents', `tr[data-incident-id="${INCIDENT}"]`, 'form.resolve-incident', 'Resolve', async (form) => {
      await form.locator('textarea[name=resolution]').fill('Browser test: payout resolved as failed after the revert.');
    }));
  if (approved) {
    await check(`${REVIEW} is paid on chain after the approval`, async () => {
      const deadline = Date.now() + PAID_TIMEOUT_MS;
      let status = '';
      while (Date.now() < deadline) {
        status = await statusOnDetail(page, REVIEW);
        if (status === 'paid') return `paid; attempts rows: ${await page.locator('table#attempts tr').count()}`;
        await sleep(1_000);
      }
      throw new Error(`still ${status} after ${PAID_TIMEOUT_MS} ms`);
    });
    await check(`${REVIEW}'s page links its transaction to the explorer; the timeline tells the review and the landing`, async () => {
      await statusOnDetail(page, REVIEW);
      const links = await page.locator('table#attempts a.explorer').evaluateAll((as) => as.map((a) => a.getAttribute('href')));
      assert(links.length >= 2, `${links.length} explorer links (the sent transaction and where it landed)`);
      const wrong = links.filter((h) => !EXPLORER_TX.test(h));
      assert(wrong.length === 0, `not explorer links: ${wrong.join(' ')}`);
      const timeline = await page.locator('ol#timeline').innerText();
      for (const words of ['created', 'held for review', 'approved in review', 'operator approve', 'mined in block', 'paid']) {
        assert(timeline.includes(words), `timeline lacks "${words}": ${timeline.slice(0, 600)}`);
      }
      return `${links.length} links`;
    });
  }

  // Sign out, then back in for the audit log.
  await check('sign out: back at /dashboard/login and the session is gone', async () => {
    await goto(page, '/dashboard');
    const form = page.locator('form#sign-out');
    const r = await submitAndCapture(page, '/dashboard/logout', () => form.locator('button, input[type=submit]').first().click());
    assert(r.status() === 303, `POST /dashboard/logout: ${r.status()}`);
    assert(pathOf(page.url()) === '/dashboard/login', `now at ${page.url()}`);
    const again = await page.request.get(`${BASE}/dashboard`, { maxRedirects: 0 });
    assert(again.status() === 303 && pathOf(again.headers()['location'] ?? '') === '/dashboard/login', `GET /dashboard after sign-out: ${again.status()}`);
  });
  await check('sign in again', async () => {
    const r = await signIn(page, OPERATOR_KEY);
    assert(r.status() === 303 && pathOf(page.url()) === '/dashboard', `status ${r.status()}, at ${page.url()}`);
  });
  await check('a webhook delivery is redispatched from the events page', async () => {
    const r0 = await goto(page, `/dashboard/events?merchant=${FIXTURE.merchant_id}`);
    assert(r0.status() === 200, `status ${r0.status()}`);
    const row = page.locator('table#events tr[data-event-id]').first();
    const event = await row.getAttribute('data-event-id');
    const form = row.locator('form.redispatch');
    await form.locator('input[name=confirm]').check();
    const r = await submitAndCapture(page, `/dashboard/events/${event}/redispatch`, () => form.getByRole('button', { name: 'Redispatch', exact: true }).click());
    assert(r.status() === 303, `status ${r.status()}`);
    const audit = await goto(page, '/dashboard/audit');
    assert(audit.status() === 200, `audit status ${audit.status()}`);
    const text = await page.locator('table#audit-log').innerText();
    assert(/redispatch/.test(text) && text.includes(event), `no redispatch of ${event} in the audit log`);
    return event;
  });
  await check('audit log: sign-in, sign-out, approve, reject, resolve and resolve-incident, each with who and when', async () => {
    const r = await goto(page, '/dashboard/audit');
    assert(r.status() === 200, `status ${r.status()}`);
    const rows = await page.locator('table#audit-log tbody tr, table#audit-log tr:has(td)').evaluateAll((rs) =>
      [...new Set(rs)].map((row) => ({ text: row.innerText, cells: row.querySelectorAll('td, th').length })));
    const wanted = [
      ['sign-in', /sign[\s_-]?in/i, null],
      ['sign-out', /sign[\s_-]?out/i, null],
      ['approve', /approve/i, REVIEW],
      ['resolve', /resolve/i, ATTENTION],
      ['resolve incident', /resolve[\s_-]?incident/i, INCIDENT],
    ];
    if (REJECT) wanted.push(['reject', /reject/i, REJECT]);
    const missing = wanted.filter(([, re, subject]) => !rows.some((row) => re.test(row.text) && (!subject || row.text.includes(subject))));
    assert(missing.length === 0, `missing: ${missing.map(([n, , s]) => (s ? `${n} ${s}` : n)).join(', ')} (${rows.length} rows)`);
    const thin = rows.filter((row) => row.cells < 4);
    assert(thin.length === 0, `${thin.length} row(s) with fewer than 4 cells (action, subject, who, when)`);
    return `${rows.length} rows`;
  });
  await check('screenshot audit log after the actions', () => screenshot(page, 'audit-after'));
  await context.close();
} catch (e) {
  await check('run', () => { throw e; });
} finally {
  await anon.dispose().catch(() => {});
  await browser.close().catch(() => {});
}

const failed = results.filter((r) => !r.ok);
console.log(`${results.length - failed.length} of ${results.length} checks passed${failed.length ? `; failed: ${failed.map((r) => r.name).join(' / ')}` : ''}`);
process.exit(failed.length ? 1 : 0);
