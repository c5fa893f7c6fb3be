// End-to-end test of a browser publishing a point cloud: two headless
// Chromium pages open the same scene on a real `xrealm serve`; page A
// presses "Publish a point cloud", and its Web Worker encodes the synthetic
// figure with draco3d and sends the fragments up its data channel; the
// node publishes them as A's tracks pc0-pc2, and page B receives, decodes
// and draws them at A's avatar. When A stops publishing, B's cloud goes.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MARK_OFF, MARK_ON, REPO_DIR, launchRTCBrowser, layerPixels, startServer, toggleMark, waitFor, type XrealmServer } from './harness';
import { stats } from './pcpub';

const SCENE = 'pcpublish';
const POINTS = 4000;

let srv: XrealmServer;
let browser: Browser;

beforeAll(async () => {
  srv = await startServer();
  browser = await launchRTCBrowser();
}, 300_000);

afterAll(async () => {
  await browser?.close();
  await srv?.stop();
});

async function open(name: string, query: string, problems: string[]): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 800, height: 450 } })).newPage();
  page.on('pageerror', (e) => problems.push(`${name} pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' || (m.type() === 'warning' && m.text().includes('point cloud'))) problems.push(`${name}: ${m.text()}`);
  });
  await page.goto(`${srv.url}/public/${SCENE}?quality=low&media=0&${query}`);
  await page.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
  await waitFor(`${name} joined the SFU`, () => page.evaluate(() => (window as any).xrealm.sfu?.connection?.connected), 30_000);
  return page;
}

const pubStats = (p: Page) => p.evaluate(() => (window as any).xrealm.pcpublisher.stats());

describe('publishing a point cloud from the browser', () => {
  it('sends the Draco-encoded figure through the SFU to another viewer, drawn at the avatar', async () => {
    const problems: string[] = [];
    const a = await open('A', `pcpoints=${POINTS}&pcfps=10`, problems);
    const b = await open('B', 'pcpublish=0', problems);
    expect(await b.$('#xr-pcpub')).toBeNull();
    await a.evaluate(() => (document.querySelector('#xr-camera') as any).setAttribute('position', '0 1.6 -1.5'));
    await b.evaluate(() => (document.querySelector('#xr-camera') as any).setAttribute('position', '0 1.6 1.5'));
    const aClient: string = await a.evaluate(() => (window as any).xrealm.sfu.connection.client);

    await a.click('#xr-pcpub');
    await waitFor('A publishing', async () => (await pubStats(a)).framesSent >= 5, 30_000).catch(async (e) => {
      throw new Error(`${e.message}: ${JSON.stringify(await pubStats(a))}; ${JSON.stringify(problems)}`);
    });
    expect(await a.getAttribute('#xr-pcpub', 'aria-pressed')).toBe('true');
    expect(await toggleMark(a, '#xr-pcpub')).toBe(MARK_ON); // on, without colour too

    // B receives whole frames (all three descriptions) of A's figure
    let best = 0;
    await waitFor('a complete frame of A at B', async () => {
      const p = (await stats(b))?.publishers.find((x: any) => x.client === aClient);
      best = Math.max(best, p?.lastFramePoints ?? 0);
      return best === POINTS;
    }, 40_000).catch(async (e) => {
      throw new Error(`${e.message}; best ${best} of ${POINTS}; B ${JSON.stringify(await stats(b))}; A ${JSON.stringify(await pubStats(a))}; ${JSON.stringify(problems)}\n${srv.log().slice(-3000)}`);
    });
    // at A's avatar: A's camera pose reaches B over the scene bus
    await waitFor('A\'s cloud at its avatar', async () => (await stats(b))?.publishers.find((x: any) => x.client === aClient)?.anchor === 'avatar', 20_000);
    const sb = await stats(b);
    expect(sb.decodeErrors).toBe(0);
    expect(sb.badMessages).toBe(0);
    expect(await layerPixels(b, 'xr-pointclouds')).toBeGreaterThan(200);
    mkdirSync(join(REPO_DIR, 'web', 'test-results'), { recursive: true });
    await b.screenshot({ path: join(REPO_DIR, 'web', 'test-results', 'pcpublish.png') });

    // frames keep coming at the publisher's rate (loose bounds: a loaded machine)
    const frames = async () => (await stats(b)).publishers.find((x: any) => x.client === aClient).frames;
    const f0 = await frames();
    await waitFor('five more of A\'s frames on B', async () => (await frames()) - f0 >= 5, 15_000);
    const sa = await pubStats(a);
    expect(sa.state).toBe('publishing');
    expect(sa.bytesSent).toBeGreaterThan(0);
    // the node counts what A published and drops none of it
    const m = await (await fetch(`${srv.url}/metrics`)).text();
    const line = (name: string) => Number(m.match(new RegExp(`${name}\\{[^}]*client="public-${SCENE}/${aClient}"[^}]*\\} (\\d+)`))?.[1] ?? -1);
    expect(line('xrealm_sfu_publisher_datachannel_messages_total')).toBeGreaterThan(0);
    expect(line('xrealm_sfu_publisher_datachannel_dropped_total')).toBe(0);

    // A stops: its tracks go idle at the node, and its cloud goes from B
    await a.click('#xr-pcpub');
    expect(await a.getAttribute('#xr-pcpub', 'aria-pressed')).toBe('false');
    expect(await toggleMark(a, '#xr-pcpub')).toBe(MARK_OFF);
    expect((await pubStats(a)).state).toBe('off');
    await waitFor('A\'s cloud to go', async () => !(await stats(b))?.publishers.some((x: any) => x.client === aClient), 20_000);
    await a.context().close();
    expect(problems).toEqual([]);
    await b.context().close();
  });

  it('a publisher whose worker failed to load says so, and the next press starts a new worker', async () => {
    const problems: string[] = [];
    const a = await open('A', `pcpoints=1000&pcfps=4`, problems);
    // The worker's script is not there the first time (a server updated
    // under the page answers 404 for the old build's assets).
    let refused = 0;
    await a.route(/\/assets\/pcpubworker-[^/]*\.js$/, (r) => (refused++ === 0 ? r.fulfill({ status: 404, body: 'gone' }) : r.continue()));
    await a.click('#xr-pcpub');
    await waitFor('A says publishing failed', async () => (await pubStats(a)).state.startsWith('failed'), 15_000).catch(async (e) => {
      throw new Error(`${e.message}: ${JSON.stringify(await pubStats(a))}`);
    });
    expect(await a.getAttribute('#xr-pcpub', 'aria-pressed')).toBe('false');
    expect(await a.textContent('.pcpub-line')).toMatch(/^failed: /);
    await a.click('#xr-pcpub');
    await waitFor('A publishing after all', async () => (await pubStats(a)).framesSent >= 2, 30_000).catch(async (e) => {
      throw new Error(`${e.message}: ${JSON.stringify(await pubStats(a))}; worker script asked for ${refused} times`);
    });
    expect(refused).toBe(2);
    expect(problems.filter((p) => !/404|publishing a point cloud failed/.test(p))).toEqual([]);
    await a.context().close();
  });

  it('a viewer whose point-cloud decoder cannot start says why in its panel, and joins for the rest', async () => {
    const page = await (await browser.newContext({ viewport: { width: 800, height: 450 } })).newPage();
    await page.route(/\/assets\/pcworker-[^/]*\.js$/, (r) => r.fulfill({ status: 404, body: 'gone' }));
    await page.goto(`${srv.url}/public/${SCENE}-nodecoder?quality=low&media=0`);
    await page.waitForSelector('a-scene[data-loaded="true"]', { state: 'attached', timeout: 30_000 });
    await waitFor('the decoder refused', async () => (await page.getAttribute('#xr-pointclouds', 'data-state'))?.startsWith('no decoder'), 15_000);
    await waitFor('the line says it', async () => /^no decoder: its worker could not be started \(its script did not load: if the server was updated, reload the page\)$/
      .test((await page.textContent('#xr-pointclouds .pc-line')) ?? ''), 5_000).catch(async (e) => {
      throw new Error(`${e.message}: ${await page.textContent('#xr-pointclouds .pc-line')}`);
    });
    // the publisher still joins the SFU
    await waitFor('joined the SFU for publishing', () => page.evaluate(() => (window as any).xrealm.sfu?.connection?.connected), 30_000);
    // and the line stays (the session's states are not the decoder's)
    expect(await page.getAttribute('#xr-pointclouds', 'data-state')).toMatch(/^no decoder/);
    await page.context().close();
  });
});
