// Headless Chromium (Debian's /usr/bin/chromium, no browser download) driven
// by puppeteer-core, and a page that records every problem: a console error,
// an uncaught exception, a failed request or an HTTP error answer. Only the
// 403s a test declares expected are let through.
import { mkdtempSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';

export const VIEWPORT = { width: 1280, height: 800 };

export function launch() {
  return puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    // a stuck browser call fails its test in a minute rather than in three
    protocolTimeout: 60_000,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
}

/** Where screenshots go: $QUEENSIDE_SCREENSHOTS, else a new temporary directory. */
export function screenshotDir() {
  const dir = process.env.QUEENSIDE_SCREENSHOTS;
  if (dir) {
    mkdirSync(dir, { recursive: true });
    return dir;
  }
  return mkdtempSync(join(tmpdir(), 'queenside-screenshots-'));
}

const FORBIDDEN_TEXT = /status of 403/;

/**
 * A new 1280x800 page that watches for problems.
 * page.problems lists them; page.allow403(pathRe) lets 403 answers (and the
 * browser's console note about them) through for URLs matching pathRe.
 */
export async function openPage(browser) {
  const page = await browser.newPage();
  await page.setViewport(VIEWPORT);
  const problems = [];
  const consoleTexts = [];
  const allowed = [];
  const isAllowed403 = (url) => allowed.some((re) => re.test(new URL(url).pathname));
  page.on('console', (msg) => {
    consoleTexts.push(msg.text());
    if (msg.type() !== 'error' && msg.type() !== 'assert') return;
    const url = msg.location()?.url;
    if (FORBIDDEN_TEXT.test(msg.text()) && url && isAllowed403(url)) return;
    problems.push(`console ${msg.type()}: ${msg.text()} (${url || 'no url'})`);
  });
  page.on('pageerror', (err) => problems.push(`uncaught: ${err.message}`));
  page.on('requestfailed', (req) => {
    if (page.isClosed()) return;
    problems.push(`request failed: ${req.method()} ${req.url()}: ${req.failure()?.errorText}`);
  });
  page.on('response', (res) => {
    const status = res.status();
    if (status < 400) return;
    if (status === 403 && isAllowed403(res.url())) return;
    problems.push(`HTTP ${status}: ${res.request().method()} ${res.url()}`);
  });
  page.problems = problems;
  page.consoleTexts = consoleTexts;
  page.allow403 = (re) => allowed.push(re);
  return page;
}

/** The text of a selector, once it exists. */
export async function text(page, selector) {
  await page.waitForSelector(selector);
  return page.$eval(selector, (el) => el.textContent.trim());
}

/** Waits until the element matching selector has data-value (or text) equal to want. */
export async function waitValue(page, selector, want, { timeout = 15_000, attr = 'value' } = {}) {
  try {
    await page.waitForFunction((sel, w, a) => {
      const el = document.querySelector(sel);
      return el !== null && el.dataset[a] === String(w);
    }, { timeout, polling: 100 }, selector, want, attr);
  } catch (err) {
    const got = await page.$eval(selector, (el, a) => el.dataset[a], attr).catch(() => '(absent)');
    throw new Error(`${selector} data-${attr}: want ${want}, have ${got} (${err.message})`);
  }
}

/**
 * Ends a test's page: saves its screenshot into dir as <shot>.png when
 * shot is given, closes it, and fails on any problem the page had.
 */
export async function finishPage(page, dir, shot) {
  if (shot) await page.screenshot({ path: join(dir, `${shot}.png`) });
  const problems = [...page.problems];
  await page.close();
  assert.deepEqual(problems, [], 'the page had problems');
}
