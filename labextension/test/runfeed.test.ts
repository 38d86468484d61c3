import { describe, expect, it } from 'vitest';

import { JiyuApi } from '../src/api';
import { IRunEvent } from '../src/runevents';
import { RunFeed } from '../src/runfeed';
import { run } from './records';

/** The server's events route over a log given as chunks: each request at an offset gets the
 * chunk that starts there (as `read_events` answers), an unknown offset gets nothing new. */
function apiOver(
  chunks: Array<{ at: number; events: IRunEvent[]; next: number }>,
  status = 'failed'
) {
  const requested: number[] = [];
  const api = {
    run: async () => run({ status, kind: 'kernel' }),
    ranks: async () => [],
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
    const error: IRunEvent = {
      kind: 'error',
      t: 2,
      message: 'RuntimeError: x … [291808 characters left out] … y'
    };
    const end: IRunEvent = { kind: 'end', t: 3, status: 'failed' };
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
});
