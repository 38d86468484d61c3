import { describe, expect, it } from 'vitest';

import { JiyuApi } from '../src/api';
import { RunFeed } from '../src/runfeed';
import { run } from './records';
import type { Event, RunStatus } from '../src/api.generated';

/** The server's events route over a log given as chunks: each request at an offset gets the
 * chunk that starts there (as `read_events` answers), an unknown offset gets nothing new. */
function apiOver(
  chunks: Array<{ at: number; events: Event[]; next: number }>,
  status: RunStatus = 'failed'
) {
  const requested: number[] = [];
  const api = {
    run: async () => run({ status, kind: 'kernel' }),
    ranks: async () => [],
    checkpoints: async () => ({ run_id: 'abc', checkpoints: [], rotated: 0 }),
    events: async (_id: string, offset: number) => {
      requested.push(offset);
      const chunk = chunks.find(c => c.at === offset);
      return chunk ? { events: chunk.events, offset: chunk.next } : { events: [], offset };
    }
  } as unknown as JiyuApi;
  return { api, requested };
}

describe('RunFeed', () => {
  it('reads past a chunk without events to the end of a finished run', async () => {
    const error: Event = {
      kind: 'error',
      t: 2,
      message: 'RuntimeError: x … [291808 characters left out] … y'
    };
    const end: Event = { kind: 'end', t: 3, status: 'failed' };
    const { api, requested } = apiOver([
      { at: 0, events: [{ kind: 'start', t: 1 }], next: 100 },
      { at: 100, events: [], next: 300_100 }, // a long line of garbage, skipped by the server
      { at: 300_100, events: [error, end], next: 300_400 }
    ]);
    const feed = new RunFeed(api, 'abc');
    await feed.update();
    expect(requested).toEqual([0, 100, 300_100, 300_400]);
    expect(feed.history.errors.map(e => e.message)).toEqual([error.message]);
    expect(feed.history.end?.status).toBe('failed');
    expect(feed.done).toBe(true);
  });

  it('never goes back to an earlier offset', async () => {
    const { api, requested } = apiOver([
      { at: 0, events: [{ kind: 'start', t: 1 }], next: 50 },
      { at: 50, events: [], next: 10 }
    ]);
    const feed = new RunFeed(api, 'abc');
    await feed.update();
    expect(requested).toEqual([0, 50]);
  });

  it('asks which checkpoints exist when the log records a new one, not on every refresh', async () => {
    const { api } = apiOver([
      { at: 0, events: [{ kind: 'start', t: 1 }], next: 10 },
      { at: 10, events: [{ kind: 'ckpt', t: 2, step: 5, path: '/c/5.pt' }], next: 20 }
    ]);
    let asked = 0;
    (api as unknown as Record<string, unknown>).run = async () => run({ status: 'running' });
    (api as unknown as Record<string, unknown>).checkpoints = async () => {
      asked += 1;
      return { run_id: 'abc', checkpoints: [{ step: 5, path: '/c/5.pt', bytes: 10 }], rotated: 2 };
    };
    const feed = new RunFeed(api, 'abc');
    await feed.update();
    await feed.update(); // nothing new in the log
    expect(asked).toBe(1);
    expect(feed.checkpoints?.rotated).toBe(2);
  });
});
