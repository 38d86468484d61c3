import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';

import { logTicks, niceTicks, scales, smooth } from '../src/chart';
import { Comparison } from '../src/comparebody';
import { compareRows, differingParams } from '../src/comparison';
import { Metrics, RunDetails } from '../src/runpagebody';
import { emptyHistory, foldEvents, resumeCommand } from '../src/runevents';
import { run } from './records';
import type { Event } from '../src/api.generated';

function history(losses: number[], extra: Event[] = []) {
  const events: Event[] = [
    { kind: 'start', t: 100, total_steps: losses.length, amp: 'bf16', batch_size: 32 },
    ...losses.map((loss, i) => ({
      kind: 'step' as const,
      t: 101 + i,
      step: i + 1,
      loss,
      epoch: 1
    })),
    ...extra
  ];
  return foldEvents(emptyHistory(), events);
}

describe('smoothing', () => {
  it('on a log axis stays within the curve where a linear mean sits above it', () => {
    const spiky = Array.from({ length: 40 }, (_, i) => ({ x: i, y: i % 10 === 0 ? 100 : 0.01 }));
    const log = smooth(spiky, 0.9, 'log');
    const linear = smooth(spiky, 0.9, 'linear');
    const median = 0.01;
    expect(log[39].y).toBeLessThan(median * 10);
    expect(linear[39].y).toBeGreaterThan(median * 100);
  });

  it('weight 0 leaves the points as they are', () => {
    const points = [
      { x: 1, y: 3 },
      { x: 2, y: 1 }
    ];
    expect(smooth(points, 0, 'log')).toEqual(points);
  });
});

describe('ticks', () => {
  it('are round numbers, powers of ten on a log axis', () => {
    expect(niceTicks(0, 100, 5)).toEqual([0, 20, 40, 60, 80, 100]);
    expect(logTicks(0.005, 3)).toEqual([0.01, 0.1, 1]);
    // a loss from 2 down to 0.02: sub-decades label where it ends, as the notebook's summary does
    expect(logTicks(0.02, 2.5)).toEqual([0.02, 0.05, 0.1, 0.2, 0.5, 1, 2]);
    expect(logTicks(0.3, 0.9)).toEqual([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]);
  });

  it('label a log axis with the ticks where the loss is, linear ones only when too narrow', () => {
    const box = { width: 400, height: 200, left: 40, right: 10, top: 10, bottom: 20 };
    const loss = [2, 0.8, 0.3, 0.1, 0.04, 0.021].map((y, x) => ({ x, y }));
    expect(scales([loss], 'log', box).yTicks).toEqual([0.05, 0.1, 0.2, 0.5, 1, 2]);
    const flat = [0.51, 0.52, 0.53].map((y, x) => ({ x, y }));
    expect(scales([flat], 'log', box).yTicks).toEqual(niceTicks(0.51, 0.53, 5));
    const short = [2.4, 1.5, 0.93].map((y, x) => ({ x, y }));
    expect(scales([short], 'log', box).yTicks).toEqual([1, 1.5, 2]);
  });
});

describe('the run page', () => {
  it('draws train and val loss and lists checkpoints with the command that resumes', () => {
    const h = history(
      [2, 1, 0.5],
      [
        { kind: 'val', t: 104, step: 3, epoch: 1, loss: 0.7, accuracy: 0.9 },
        { kind: 'ckpt', t: 105, step: 3, path: '/runs/ab/ckpt-3.pt' }
      ]
    );
    const html = renderToStaticMarkup(
      <RunDetails run={run({ params: { lr: 0.01 } })} history={h} onStop={() => undefined} />
    );
    expect(html).toContain('data-label="train loss"');
    expect(html).toContain('data-label="val loss"');
    expect(html).toContain('90.0%');
    expect(html).toContain('Reading which checkpoints exist');
    const listed = renderToStaticMarkup(
      <RunDetails
        run={run({ params: { lr: 0.01 } })}
        history={h}
        checkpoints={{
          run_id: 'a1b2c3d4',
          checkpoints: [{ step: 3, path: '/runs/ab/ckpt-3.pt', bytes: 2048 }],
          rotated: 7
        }}
        onStop={() => undefined}
      />
    );
    expect(listed).toContain('%train --resume /runs/ab/ckpt-3.pt --name digits-mlp');
    expect(listed).toContain('1 on disk · 7 older rotated out (--keep-ckpts) or deleted');
    expect(listed).toContain('2.0 KiB');
    expect(html).toContain('bf16');
    expect(html).toContain('Stop digits-mlp');
    // the notebook's folder cut to its last parts, the whole path a hover away
    expect(html).toContain('title="/work/train.ipynb"');
  });

  it('shows no validation rows without validation, and no eta once the run ended', () => {
    const trained = history([2, 1, 0.5], []);
    const ended = renderToStaticMarkup(
      <Metrics run={run({ status: 'succeeded' })} history={trained} />
    );
    expect(ended).not.toContain('val loss');
    expect(ended).not.toContain('val accuracy');
    expect(ended).not.toContain('<dt>eta</dt>');
    const validated = history(
      [2, 1],
      [{ kind: 'val', t: 104, step: 2, epoch: 1, loss: 0.7, accuracy: 0.9 }]
    );
    const running = renderToStaticMarkup(
      <Metrics run={run({ status: 'running' })} history={validated} />
    );
    expect(running).toContain('<dt>val loss</dt>');
    expect(running).toContain('<dt>val accuracy</dt><dd>90.0%</dd>');
    expect(running).toContain('<dt>eta</dt>');
  });

  it("ends on the run's samples over its wall time, not its last short batch's rate", () => {
    const steps: Event[] = [
      { kind: 'step', t: 101, step: 27, loss: 1, samples_per_s: 790 },
      { kind: 'step', t: 102, step: 28, loss: 1, samples_per_s: 52 },
      { kind: 'end', t: 103, step: 28, status: 'succeeded', samples_per_s: 781.5 }
    ];
    const ended = renderToStaticMarkup(
      <Metrics run={run({ status: 'succeeded' })} history={history([], steps)} />
    );
    expect(ended).toContain('<dt>throughput</dt><dd>782/s</dd>');
    const running = renderToStaticMarkup(
      <Metrics run={run({ status: 'running' })} history={history([], steps.slice(0, 2))} />
    );
    expect(running).toContain('<dt>throughput</dt><dd>52/s</dd>');
  });

  it('quotes a checkpoint path with spaces in the resume command', () => {
    expect(resumeCommand('my run', { step: 1, path: '/a b/c.pt' })).toBe(
      "%train --resume '/a b/c.pt' --name 'my run'"
    );
  });
});

describe('compare', () => {
  const a = { run: run({ id: 'aaaa', params: { lr: 0.1, epochs: 3 } }), history: history([2, 1]) };
  const b = {
    run: run({ id: 'bbbb', params: { lr: 0.01, epochs: 3 } }),
    history: history([3, 2, 1.5])
  };

  it('shows only what differs, grouped, and folds the equal rows', () => {
    const { shown, metrics, folded } = compareRows([a, b]);
    const lr = shown.find(r => r.column === 'param.lr')!;
    expect(lr.differs).toBe(true);
    expect(lr.group).toBe('parameters');
    expect(lr.values).toEqual(['0.1', '0.01']);
    expect(shown.find(r => r.name === 'epochs')).toBeUndefined();
    expect(folded.find(r => r.column === 'param.epochs')!.values).toEqual(['3', '3']);
    expect(metrics.find(r => r.name === 'final loss')!.values).toEqual(['1', '1.5']);
    expect(metrics.find(r => r.name === 'final val loss')).toBeUndefined(); // no validation
  });

  const started = (lr: number, keep: number, batch: number) =>
    history(
      [1],
      [
        {
          kind: 'start',
          t: 100,
          batch_size: batch,
          model: 'DigitsCNN',
          params: 1000,
          optimizer: 'AdamW',
          optimizer_groups: [{ lr, betas: [0.9, 0.999] }, { lr: lr / 10 }],
          config: { seed: 1, lr },
          options: { epochs: 3, keep_ckpts: keep, clip: null, log_interval_s: 2 }
        }
      ]
    );

  it('records what a tracker does: optimizer per group, data, internal options folded', () => {
    const { shown, folded } = compareRows([
      { run: run({ id: 'aaaa' }), history: started(0.01, 3, 32) },
      { run: run({ id: 'bbbb' }), history: started(0.003, 5, 64) }
    ]);
    expect(shown.map(r => r.column)).toEqual([
      'param.lr',
      'optimizer.lr',
      'optimizer.lr[1]',
      'data.batch_size'
    ]);
    expect(shown.map(r => r.group)).toEqual(['parameters', 'optimizer', 'optimizer', 'data']);
    expect(shown.find(r => r.column === 'optimizer.lr[1]')!.values).toEqual(['0.001', '0.0003']);
    const keep = folded.find(r => r.column === 'option.keep_ckpts')!;
    expect(keep.internal && keep.differs).toBe(true); // differs, but internal: folded
    // folded by group, and within a group what differs first
    expect(folded.map(r => r.column).filter(c => c.startsWith('option.'))).toEqual([
      'option.keep_ckpts',
      'option.epochs',
      'option.log_interval_s'
    ]);
    expect(folded.find(r => r.column === 'model.class')!.values).toEqual([
      'DigitsCNN',
      'DigitsCNN'
    ]);
    expect(folded.find(r => r.column === 'param.seed')!.differs).toBe(false);
  });

  it('shows every non-internal row of a single run', () => {
    const { shown, folded } = compareRows([{ run: run(), history: started(0.01, 3, 32) }]);
    expect(shown.map(r => r.column)).toContain('model.class');
    expect(folded.map(r => r.column)).toEqual(['option.keep_ckpts', 'option.log_interval_s']);
  });

  it('draws one curve per run, the differing rows under group headings, "N equal rows"', () => {
    const html = renderToStaticMarkup(<Comparison runs={[a, b]} />);
    expect(html.match(/class="jp-JiyuChart-series"/g)).toHaveLength(2);
    expect(html).toContain('<tr class="jp-mod-param jp-mod-differs" data-row="param.lr">');
    expect(html).toContain('data-group="parameters"');
    expect(html).toContain('data-group="metrics"');
    expect(html).toMatch(/<details class="jp-JiyuCompare-same"><summary[^>]*>\d+ equal rows</);
    // the equal row is inside the collapsed section, after the differing one
    const details = html.indexOf('<details');
    expect(html.indexOf('data-row="param.epochs"')).toBeGreaterThan(details);
    expect(html.indexOf('data-row="param.lr"')).toBeLessThan(details);
  });

  it('draws a run validation loss dashed in its colour, only where it validated', () => {
    const validated = {
      run: run({ id: 'cccc' }),
      history: history([2, 1], [{ kind: 'val', t: 104, step: 2, epoch: 1, loss: 0.9 }])
    };
    const html = renderToStaticMarkup(<Comparison runs={[a, validated]} />);
    expect(html.match(/class="jp-JiyuChart-series"/g)).toHaveLength(3);
    expect(html).toContain('data-label="digits-mlp (cccc) val"');
    expect(html).not.toContain('data-label="digits-mlp (aaaa) val"');
  });

  it('tells runs of one name apart by their differing parameters', () => {
    const found = differingParams([
      a.run,
      b.run,
      run({ id: 'cccc', name: 'other', params: { lr: 1 } })
    ]);
    expect(found.get('aaaa')).toBe('lr=0.1');
    expect(found.get('bbbb')).toBe('lr=0.01');
    expect(found.get('cccc')).toBe('');
  });

  it("tells them apart by the optimizer's lr set in the cell's body, as Compare does", () => {
    const tracked = (lr: number) => ({
      'param.epochs': 3,
      'model.class': 'Sequential',
      'optimizer.class': 'AdamW',
      'optimizer.lr': lr,
      'data.batch_size': 64
    });
    const first = run({ id: 'aaaa', params: { epochs: 3 } }, { tracked: tracked(0.001) });
    const second = run({ id: 'bbbb', params: { epochs: 3 } }, { tracked: tracked(0.003) });
    const queued = run({ id: 'cccc', status: 'queued', params: { epochs: 3 } });
    const found = differingParams([first, second, queued]);
    expect(found.get('aaaa')).toBe('lr=0.001');
    expect(found.get('bbbb')).toBe('lr=0.003');
    expect(found.get('cccc')).toBe('');
    // a parameter that sets the optimizer's lr differs once, under its own name
    const byParam = (lr: number, id: string) =>
      run({ id, params: { lr } }, { tracked: { 'param.lr': lr, 'optimizer.lr': lr } });
    expect(differingParams([byParam(0.1, 'x'), byParam(0.2, 'y')]).get('x')).toBe('lr=0.1');
    // two columns of one name that differ apart keep their groups
    const both = (p: number, o: number, id: string) =>
      run({ id, params: { lr: p } }, { tracked: { 'param.lr': p, 'optimizer.lr': o } });
    expect(differingParams([both(1, 0.1, 'x'), both(2, 0.3, 'y')]).get('y')).toBe(
      'param.lr=2 optimizer.lr=0.3'
    );
  });
});

/** What every rank record carries beside the fields a test is about. */
const RANK_TIMES = { local_rank: 0, started: 1000, ended: null, host: 'gpu-box', nnodes: 1 };

describe('ranks', () => {
  it("show each rank's own record: pid, exit, the failing rank's error", () => {
    const html = renderToStaticMarkup(
      <RunDetails
        run={run({ status: 'failed' })}
        history={history([1])}
        ranks={[
          {
            rank: 0,
            pid: 11,
            restart: 0,
            state: 'exited',
            exit_code: 0,
            error: null,
            cuda_visible_devices: '0',
            stopped: false,
            signal: null,
            signal_name: null,
            ...RANK_TIMES
          },
          {
            rank: 1,
            pid: 12,
            restart: 0,
            state: 'exited',
            exit_code: 1,
            error: 'ValueError: x',
            cuda_visible_devices: '1',
            stopped: false,
            signal: null,
            signal_name: null,
            ...RANK_TIMES
          }
        ]}
        onStop={() => undefined}
      />
    );
    expect(html).toContain('rank 0: exited with code 0 · pid 11 · GPU 0');
    expect(html).toContain('<li class="jp-mod-failed">rank 1: ValueError: x · pid 12 · GPU 1</li>');
  });

  it('say which rank stopped on request and which a signal killed', () => {
    const record = {
      ...RANK_TIMES,
      restart: 0,
      exit_code: null,
      error: null,
      cuda_visible_devices: null,
      stopped: false,
      signal: null,
      signal_name: null
    };
    const html = renderToStaticMarkup(
      <RunDetails
        run={run({ status: 'stopped', nproc: 4 })}
        history={history([1])}
        ranks={[
          { ...record, rank: 0, pid: 11, state: 'exited', exit_code: 0, stopped: true },
          { ...record, rank: 1, pid: 12, state: 'killed', signal: 9, signal_name: 'SIGKILL' },
          { ...record, rank: 2, pid: 13, state: 'killed' },
          { ...record, rank: 3, pid: 14, state: 'exited', exit_code: 0 }
        ]}
        onStop={() => undefined}
      />
    );
    expect(html).toContain('<li class="jp-mod-stopped">rank 0: stopped on request · pid 11</li>');
    expect(html).toContain('<li class="jp-mod-failed">rank 1: killed by SIGKILL · pid 12</li>');
    expect(html).toContain('<li class="jp-mod-failed">rank 2: killed · pid 13</li>');
    expect(html).toContain('rank 3: exited with code 0 · pid 14');
  });
});
