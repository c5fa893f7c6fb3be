// Measurement, not a test: what one headless Chromium page receives,
// decodes and renders of one Go publisher at several cloud sizes. Runs only
// with XREALM_PC_MEASURE set, e.g.
//
//   XREALM_PC_MEASURE=10000x15,50000x30,100000x30 XREALM_PC_SECONDS=20 \
//     flock /tmp/xrealm-bench.lock npx vitest run test/pointcloud-measure.test.ts
//
// and prints one Markdown table row per size (also written to
// web/test-results/pointcloud-measure.md). Report the load average with it.
import { appendFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { REPO_DIR, launchRTCBrowser, startServer, xrealmBin, type XrealmServer } from './harness';
import { startPublisher, stats } from './pcpub';

const spec = process.env.XREALM_PC_MEASURE ?? '';
const seconds = Number(process.env.XREALM_PC_SECONDS ?? 20);
const sizes = spec ? spec.split(',').map((s) => s.split('x').map(Number) as [number, number]) : [];

let srv: XrealmServer;
let browser: Browser;
let bin: string;
let tmp: string;

function metric(text: string, name: string, client: string): number {
  for (const line of text.split('\n')) {
    if (line.startsWith(name + '{') && line.includes(`client="${client}"`)) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return NaN;
}

describe.runIf(sizes.length > 0)('point-cloud receive rate in one page', () => {
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'xrealm-pcmeasure-'));
    bin = xrealmBin();
    srv = await startServer({ nats: true });
    browser = await launchRTCBrowser();
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
    await srv?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('measures', async (ctx) => {
    const out = join(REPO_DIR, 'web', 'test-results', 'pointcloud-measure.md');
    mkdirSync(join(REPO_DIR, 'web', 'test-results'), { recursive: true });
    const head = '| points × fps | sent Mbit/s | dc estimate Mbit/s | frames shown/s | points decoded/s | whole-frame points (mean of samples / frame) | descriptions expired | dc drops | sequence gaps | capture→decode p50 ms | load avg |\n|---|---|---|---|---|---|---|---|---|---|---|';
    console.log(head);
    appendFileSync(out, `\n${new Date().toISOString()} (${seconds} s windows)\n\n${head}\n`);
    for (const [i, [points, fps]] of sizes.entries()) {
      const scene = `pcm${i}`;
      const pub = await startPublisher(bin, srv, { session: `public-${scene}`, client: `pub${i}`, points, fps, frames: 10 });
      if (pub.info.skip) ctx.skip();
      const page = await (await browser.newContext({ viewport: { width: 480, height: 300 } })).newPage();
      await page.goto(`${srv.url}/public/${scene}?quality=low`);
      await page.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
      await page.waitForTimeout(8000); // join, estimate ramp-up
      const m0 = await (await fetch(`${srv.url}/metrics`)).text();
      const s0 = await stats(page);
      const client = `public-${scene}/${(await page.evaluate(() => (window as any).xrealm.session().userClient))}`;
      const samples: number[] = [];
      let pps = 0;
      const n = seconds * 2;
      for (let k = 0; k < n; k++) {
        await page.waitForTimeout(500);
        const s = await stats(page);
        const p = s.publishers[0];
        if (p) samples.push(p.lastFramePoints);
        pps += s.pointsPerSecond / n;
      }
      const s1 = await stats(page);
      const m1 = await (await fetch(`${srv.url}/metrics`)).text();
      const p0 = s0.publishers[0] ?? { frames: 0 }, p1 = s1.publishers[0] ?? { frames: 0 };
      const sent = (pub.info.bytesPerFrame * 8 * fps) / 1e6;
      const est = metric(m1, 'xrealm_sfu_subscriber_datachannel_estimate_bps', client) / 1e6;
      const drops = metric(m1, 'xrealm_sfu_subscriber_datachannel_dropped_total', client) - metric(m0, 'xrealm_sfu_subscriber_datachannel_dropped_total', client);
      const mean = samples.length ? samples.reduce((a, b) => a + b, 0) / samples.length : 0;
      const row = `| ${points} × ${fps} | ${sent.toFixed(1)} | ${est.toFixed(1)} | ${((p1.frames - p0.frames) / seconds).toFixed(1)} | ${Math.round(pps)} | ${Math.round(mean)} / ${points} | ${s1.expired - s0.expired} | ${drops} | ${s1.gaps - s0.gaps} | ${s1.latencyP50Ms.toFixed(0)} | ${loadavg().map((x) => x.toFixed(2)).join(' ')} |`;
      console.log(row);
      appendFileSync(out, row + '\n');
      await page.context().close();
      await pub.stop();
    }
  }, 1_800_000);
});
