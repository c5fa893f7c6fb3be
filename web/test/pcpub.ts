// The point-cloud publisher for the browser tests: `xrealm bots pointcloud`
// (a real SFU client replaying Draco-encoded frames), started against a
// server's bus.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Page } from 'playwright-core';
import type { XrealmServer } from './harness';

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

/** Starts a publisher (bin: the xrealm binary) of points × fps as SFU client `client` of `session`; resolves when it publishes (or skips). */
export async function startPublisher(bin: string, srv: XrealmServer, o: { session: string; client: string; points: number; fps: number; frames?: number }): Promise<Publisher> {
  const proc = spawn(bin, ['bots', 'pointcloud', '--stdin', '--bus', srv.natsURL, '--token', srv.sfuToken(o.client), '--session', o.session, '--client', o.client,
    '--points', String(o.points), '--frames', String(o.frames ?? 15), '--fps', String(o.fps)], { stdio: ['pipe', 'pipe', 'pipe'] });
  let log = '';
  proc.stderr!.on('data', (b) => (log += b));
  const lines = createInterface({ input: proc.stdout! });
  const info = await new Promise<PublisherInfo>((res, rej) => {
    lines.once('line', (l) => res(JSON.parse(l)));
    proc.once('exit', (code) => rej(new Error(`xrealm bots pointcloud exited with ${code}:\n${log}`)));
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
