// Measurement, not a test: the CPU time headless Chromium spends on one
// idle scene page (nobody moves, nothing changes), drawn on demand (the
// default) and in every frame (?render=always, as A-Frame does). Runs only
// with XREALM_IDLE_MEASURE set, e.g.
//
//   XREALM_IDLE_MEASURE=1 XREALM_IDLE_SECONDS=15 npx vitest run test/idle-measure.test.ts
//
// and prints one Markdown table row per mode and quality, also with another
// idle user's page open (CPU time of all Chromium processes per wall-clock
// second, from CDP's SystemInfo; pages of 1000x700). Set
// XREALM_IDLE_ONLY_OTHERS for the last rows only. Report the load average
// with it.
import { loadavg } from 'node:os';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { launchBrowser, startServer, waitFor, type XrealmServer } from './harness';

const on = !!process.env.XREALM_IDLE_MEASURE;
const seconds = Number(process.env.XREALM_IDLE_SECONDS ?? 15);

let srv: XrealmServer;
let browser: Browser;

beforeAll(async () => {
  if (!on) return;
  srv = await startServer();
  browser = await launchBrowser();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await srv?.stop();
});

/** CPU seconds of all the browser's processes so far. */
async function cpu(b: Browser): Promise<number> {
  const s = await b.newBrowserCDPSession();
  const r = (await s.send('SystemInfo.getProcessInfo')) as { processInfo: { cpuTime: number }[] };
  await s.detach();
  return r.processInfo.reduce((n, p) => n + p.cpuTime, 0);
}

describe.skipIf(!on)('idle page CPU', () => {
  it('on demand and every frame', { timeout: 600_000 }, async () => {
    console.log('| page | CPU s/s | frames drawn | frames skipped |\n|---|---|---|---|');
    for (const [quality, others] of (process.env.XREALM_IDLE_ONLY_OTHERS ? [['low', 1]] : [['low', 0], ['high', 0], ['low', 1]]) as [string, number][]) {
      for (const mode of ['always', 'demand']) {
        // another user, idle too, whose avatar the page draws (its CPU counts too: compare the rows with it)
        const other = others ? await browser.newContext({ viewport: { width: 480, height: 300 } }) : null;
        if (other) {
          const o = await other.newPage();
          await o.goto(`${srv.url}/public/idle?quality=low`);
          await o.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
        }
        const ctx = await browser.newContext({ viewport: { width: 1000, height: 700 } });
        const p = await ctx.newPage();
        await p.goto(`${srv.url}/public/idle?quality=${quality}${mode === 'always' ? '&render=always' : ''}`);
        if (other) await waitFor('the other avatar', () => p.$('#xr-avatars [data-avatar-for]'));
        await p.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
        await waitFor('connected', async () => (await p.getAttribute('#xr-status', 'data-state')) === 'connected');
        await new Promise((r) => setTimeout(r, 3000)); // settled
        const f0 = await p.evaluate(() => (window as any).xrealm.frames);
        const c0 = await cpu(browser);
        const t0 = Date.now();
        await new Promise((r) => setTimeout(r, seconds * 1000));
        const c1 = await cpu(browser);
        const t1 = Date.now();
        const f1 = await p.evaluate(() => (window as any).xrealm.frames);
        const rate = (c1 - c0) / ((t1 - t0) / 1000);
        console.log(`| quality=${quality}${others ? ', another idle user in view (its page, on demand, counted too)' : ''} ${mode === 'always' ? 'every frame' : 'on demand'} | ${rate.toFixed(3)} | ${f1 ? f1.drawn - f0.drawn : '-'} | ${f1 ? f1.skipped - f0.skipped : '-'} |`);
        await ctx.close();
        await other?.close();
      }
    }
    console.log(`load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  });
});
