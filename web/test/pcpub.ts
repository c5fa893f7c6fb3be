// The Go point-cloud publisher (web/test/pcpub) for the browser tests:
// built once with `go build` (or taken from $XREALM_PCPUB), started
// against a server's bus.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Page } from 'playwright-core';
import { REPO_DIR, type XrealmServer } from './harness';

export interface PublisherInfo {
  ready?: boolean;
  skip?: string; // Google Draco's tools are missing
  node: string;
  points: number;
  descPoints: number[];
  fps: number;
  bytesPerFrame: number;
}

export interface Publisher {
  info: PublisherInfo;
  proc: ChildProcess;
  log(): string;
  /** Leaves the session (closes its stdin) and waits for the exit. */
  stop(): Promise<void>;
}

/** Builds pcpub into dir unless $XREALM_PCPUB names a binary. */
export function buildPublisher(dir: string): string {
  if (process.env.XREALM_PCPUB) return process.env.XREALM_PCPUB;
  const bin = join(dir, 'pcpub');
  execFileSync('go', ['build', '-o', bin, './web/test/pcpub'], { cwd: REPO_DIR, stdio: ['ignore', 'ignore', 'inherit'] });
  return bin;
}

/** Starts a publisher of points × fps as SFU client `client` of `session`; resolves when it publishes (or skips). */
export async function startPublisher(bin: string, srv: XrealmServer, o: { session: string; client: string; points: number; fps: number; frames?: number }): Promise<Publisher> {
  const proc = spawn(bin, ['--bus', srv.natsURL, '--token', srv.sfuToken(o.client), '--session', o.session, '--client', o.client,
    '--points', String(o.points), '--frames', String(o.frames ?? 15), '--fps', String(o.fps)], { stdio: ['pipe', 'pipe', 'pipe'] });
  let log = '';
  proc.stderr!.on('data', (b) => (log += b));
  const lines = createInterface({ input: proc.stdout! });
  const info = await new Promise<PublisherInfo>((res, rej) => {
    lines.once('line', (l) => res(JSON.parse(l)));
    proc.once('exit', (code) => rej(new Error(`pcpub exited with ${code}:\n${log}`)));
  });
  return {
    info, proc, log: () => log,
    stop: () => new Promise<void>((res) => {
      if (proc.exitCode !== null) return res();
      const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      proc.once('exit', () => { clearTimeout(t); res(); });
      proc.stdin!.end();
    }),
  };
}

/** The page's point-cloud statistics (PointCloudView.stats in web/src/pointcloudview.ts). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const stats = (p: Page): Promise<any> => p.evaluate(() => (window as any).xrealm?.pointclouds?.stats());
