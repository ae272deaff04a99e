// Loads a `moxi eval report` page in Debian's chromium through puppeteer-core and checks what a reader
// sees: no console errors or page errors, no request beyond the page itself (it is self-contained), the
// SVG plots laid out with visible bars, and the tables. Writes a full-page screenshot.
// Usage: node check.mjs REPORT.html SCREENSHOT.png [MIN_BARS]
import puppeteer from 'puppeteer-core';
import { pathToFileURL } from 'node:url';
import { statSync } from 'node:fs';

const [report, shot, minBarsArg] = process.argv.slice(2);
const minBars = Number(minBarsArg ?? 1);
let failed = false;
const check = (ok, what) => {
  console.log(`${ok ? 'ok' : 'not ok'} - ${what}`);
  if (!ok) failed = true;
};

const browser = await puppeteer.launch({
  executablePath: process.env.MOXI_CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run'],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 900 });
  const errors = [];
  const requests = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warn') errors.push(`${m.type()}: ${m.text()}`); });
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('requestfailed', (r) => errors.push(`requestfailed: ${r.url()}`));
  page.on('request', (r) => requests.push(r.url()));
  const url = pathToFileURL(report).href;
  const resp = await page.goto(url, { waitUntil: 'load' });
  check(resp !== null && resp.ok(), `loads ${url}`);
  check(errors.length === 0, `no console or page errors${errors.length ? ': ' + errors.join('; ') : ''}`);
  const others = requests.filter((u) => u !== url);
  check(others.length === 0, `fetches nothing else${others.length ? ': ' + others.join(', ') : ''}`);
  const charts = await page.$$eval('svg.chart', (s) => s.map((e) => { const b = e.getBoundingClientRect(); return [b.width, b.height]; }));
  check(charts.length >= 3 && charts.every(([w, h]) => w > 100 && h > 100), `${charts.length} plots laid out`);
  const bars = await page.$$eval('svg.chart rect.bar', (r) => r.filter((e) => { const b = e.getBoundingClientRect(); return b.width > 0 && b.height > 0; }).length);
  check(bars >= minBars, `${bars} visible bars (at least ${minBars})`);
  const whiskers = await page.$$eval('svg.chart line.whisker', (l) => l.length);
  check(whiskers > 0, `${whiskers} interval whiskers`);
  const tables = await page.$$eval('table', (t) => t.length);
  check(tables >= 3, `${tables} tables`);
  const heading = await page.$eval('h1', (h) => h.textContent);
  check(heading === 'moxi agent report', 'the heading');
  await page.screenshot({ path: shot, fullPage: true });
  check(statSync(shot).size > 10000, `screenshot ${shot}`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
