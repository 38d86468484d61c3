import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';

import { JiyuApi } from '../src/api';
import { compareSeries, Comparison } from '../src/comparebody';
import { DEFAULT_OPTIONS } from '../src/lossplot';
import { ancestorSeries, readLineage } from '../src/lineage';
import { emptyHistory, foldEvents, parentOf } from '../src/runevents';
import { RunFeed } from '../src/runfeed';
import { Lineage, RunDetails } from '../src/runpagebody';
import { run, summary } from './records';
import type { Event } from '../src/api.generated';

/** A run's events: a start (resumed from `parent` at `at` when given), then steps from `from`. */
function events(from: number, losses: number[], parent?: [string, number]): Event[] {
  const start: Event = { kind: 'start', t: 100, start_step: from - 1 };
  if (parent) {
    start.parent_run = parent[0];
    start.parent_step = parent[1];
  }
  return [
    start,
    ...losses.map((loss, i) => ({ kind: 'step' as const, t: 101 + i, step: from + i, loss }))
  ];
}

function historyOf(list: Event[]) {
  return foldEvents(emptyHistory(), list);
}

/**
 * The server over stored runs: `GET runs/{id}` and their events in one chunk (the next
 * request at the end offset gets nothing new); an unknown id answers 404 as the server does.
 */
function apiOver(runs: Record<string, { name: string; events: Event[] }>) {
  const asked: string[] = [];
  const api = {
    run: async (id: string) => {
      asked.push(id);
      if (!runs[id]) {
        throw new Error(`404: no run ${id}`);
      }
      return run({ id, name: runs[id].name, status: 'stopped', kind: 'kernel' });
    },
    ranks: async () => [],
    checkpoints: async () => ({ run_id: 'x', checkpoints: [], rotated: 0 }),
    events: async (id: string, offset: number) =>
      offset === 0 ? { events: runs[id].events, offset: 10 } : { events: [], offset }
  } as unknown as JiyuApi;
  return { api, asked };
}

/** Every element of a rendered tree whose type is `type`, function components called. */
function find(node: React.ReactNode, type: string): React.ReactElement[] {
  if (Array.isArray(node)) {
    return node.flatMap(n => find(n, type));
  }
  if (!React.isValidElement(node)) {
    return [];
  }
  const element = node as React.ReactElement<{ children?: React.ReactNode }>;
  if (typeof element.type === 'function') {
    return find((element.type as (p: unknown) => React.ReactNode)(element.props), type);
  }
  return [...(element.type === type ? [element] : []), ...find(element.props.children, type)];
}

describe('a resumed run', () => {
  it('knows its parent from its start event, else from its record', () => {
    expect(parentOf(historyOf(events(31, [1], ['pppp', 30])))).toEqual({ run: 'pppp', step: 30 });
    expect(parentOf(historyOf(events(1, [1])))).toBeNull();
    const queued = run({}, summary({ parent_run: 'qqqq', parent_step: 7 }));
    expect(parentOf(emptyHistory(), queued)).toEqual({ run: 'qqqq', step: 7 });
  });

  it('reads its lineage back to the first run, parent first', async () => {
    const { api } = apiOver({
      gggg: { name: 'digits', events: events(1, [5, 4, 3, 2.5]) },
      pppp: { name: 'digits', events: events(3, [2, 1.5, 1.2], ['gggg', 2]) }
    });
    const chain = await readLineage(api, { run: 'pppp', step: 4 });
    expect(chain.map(a => [a.run.id, a.until])).toEqual([
      ['pppp', 4],
      ['gggg', 2]
    ]);
    // oldest first, each only up to where its child resumed, dimmed
    const series = ancestorSeries(chain, 'red', a => a.run.id);
    expect(series.map(s => [s.label, s.points.map(p => p.x), s.dimmed])).toEqual([
      ['gggg', [1, 2], true],
      ['pppp', [3, 4], true]
    ]);
  });

  it('stops the chain at a run that is gone or already seen', async () => {
    const gone = apiOver({ pppp: { name: 'a', events: events(1, [1], ['deleted', 1]) } });
    expect((await readLineage(gone.api, { run: 'pppp', step: 1 })).map(a => a.run.id)).toEqual([
      'pppp'
    ]);
    const loop = apiOver({
      aaaa: { name: 'a', events: events(1, [1], ['bbbb', 1]) },
      bbbb: { name: 'b', events: events(1, [1], ['aaaa', 1]) }
    });
    const chain = await readLineage(loop.api, { run: 'aaaa', step: 1 });
    expect(chain.map(a => a.run.id)).toEqual(['aaaa', 'bbbb']);
    expect(loop.asked).toEqual(['aaaa', 'bbbb']);
  });

  it("feeds its page the parent's history once, not on every refresh", async () => {
    const { api, asked } = apiOver({
      cccc: { name: 'digits', events: events(31, [0.9, 0.8], ['pppp', 30]) },
      pppp: { name: 'digits', events: events(1, [3, 2]) }
    });
    const feed = new RunFeed(api, 'cccc');
    await feed.update();
    await feed.update();
    expect(feed.ancestors.map(a => a.run.id)).toEqual(['pppp']);
    expect(asked.filter(id => id === 'pppp')).toHaveLength(1);
  });

  it('shows the joined curve and the lineage with a link to the parent page', () => {
    const parent = {
      run: run({ id: 'pppp', name: 'digits-first' }),
      history: historyOf(events(1, [3, 2, 1.5, 1.4])),
      until: 3
    };
    const child = run({ id: 'cccc', name: 'digits' });
    const history = historyOf(events(4, [1.2, 1.0], ['pppp', 3]));
    const html = renderToStaticMarkup(
      <RunDetails run={child} history={history} ancestors={[parent]} onStop={() => undefined} />
    );
    expect(html).toContain(
      'class="jp-JiyuChart-series jp-mod-dimmed" data-label="digits-first (pppp) before resume"'
    );
    expect(html).toContain('data-label="train loss"');
    expect(html).toMatch(/aria-label="Lineage"[^]*digits-first \(pppp\)[^]*at step 3 → /);
    const opened: string[][] = [];
    const buttons = find(
      <Lineage
        run={child}
        history={history}
        ancestors={[parent]}
        onOpen={(id, name) => opened.push([id, name])}
      />,
      'button'
    );
    expect(buttons.map(b => (b.props as { 'aria-label': string })['aria-label'])).toEqual([
      'Open the page of digits-first (pppp)'
    ]);
    (buttons[0].props as { onClick: () => void }).onClick();
    expect(opened).toEqual([['pppp', 'digits-first']]);
  });

  it('names the parent by id while its record is not read, and nothing when not resumed', () => {
    const child = run({ id: 'cccc' });
    const resumed = renderToStaticMarkup(
      <Lineage run={child} history={historyOf(events(4, [1], ['pppp', 3]))} ancestors={[]} />
    );
    expect(resumed).toContain('aria-label="Open the page of pppp (pppp)"');
    expect(resumed).toContain('at step 3');
    const fresh = renderToStaticMarkup(
      <Lineage run={child} history={historyOf(events(1, [1]))} ancestors={[]} />
    );
    expect(fresh).toBe('');
  });

  it('in Compare joins each resumed run to its parent in its colour, by step only', () => {
    const parent = {
      run: run({ id: 'pppp' }),
      history: historyOf(events(1, [3, 2, 1.5])),
      until: 2
    };
    const resumed = {
      run: run({ id: 'cccc', name: 'digits' }),
      history: historyOf(events(3, [1.2, 1.0], ['pppp', 2])),
      ancestors: [parent]
    };
    const other = { run: run({ id: 'oooo', name: 'digits' }), history: historyOf(events(1, [2])) };
    const series = compareSeries([other, resumed], DEFAULT_OPTIONS);
    const joined = series.filter(s => s.dimmed);
    expect(joined.map(s => [s.label, s.points.map(p => p.x)])).toEqual([
      ['digits (cccc) ← pppp', [1, 2]]
    ]);
    expect(joined[0].color).toBe(series.find(s => s.label === 'digits (cccc)')!.color);
    expect(
      compareSeries([resumed], { ...DEFAULT_OPTIONS, xAxis: 'time' }).some(s => s.dimmed)
    ).toBe(false);
    const html = renderToStaticMarkup(<Comparison runs={[other, resumed]} />);
    expect(html.match(/class="jp-JiyuChart-series jp-mod-dimmed"/g)).toHaveLength(1);
  });
});
