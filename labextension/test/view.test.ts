import { describe, expect, it } from 'vitest';

import { describeRun, shortPaths, visibleRuns } from '../src/view';
import { run } from './records';

describe('describeRun', () => {
  it('derives progress, step, loss, rate and duration from the summary', () => {
    const v = describeRun(
      run(
        {},
        { step: 120, total_steps: 400, epoch: 1, loss: 0.4321, samples_per_s: 1530, progress: 0.3 }
      )
    );
    expect(v.progress).toBe(0.3);
    expect(v.stepText).toBe('step 120/400 · ep 1');
    expect(v.lossText).toBe('loss 0.4321');
    expect(v.rateText).toBe('1530/s');
    expect(v.durationText).toBe('1:23');
    expect(v.kind).toBe('job ×2');
    expect(v.canStop).toBe(true);
  });

  it('shows no old rate while a run is stalled, and the rate again once it moves', () => {
    const summary = { step: 120, total_steps: 400, samples_per_s: 4063 };
    expect(describeRun(run({ stalled_since: 1700000000 }, summary)).rateText).toBe('stalled');
    expect(describeRun(run({ stalled_since: null }, summary)).rateText).toBe('4063/s');
  });

  it('shows a ranks pool by its size and the notebook that drives it', () => {
    const v = describeRun(run({ kind: 'ranks', nproc: 4, notebook: '/work/explore.ipynb' }));
    expect(v.kind).toBe('ranks ×4');
    expect(v.stepText).toBe('ranks pool');
    expect(v.note).toBe('driven by explore.ipynb');
    expect(v.canStop).toBe(true);
  });

  it('has no progress before the run says how long it is', () => {
    const v = describeRun(run({ status: 'queued' }));
    expect(v.progress).toBeNull();
    expect(v.stepText).toBe('starting');
    expect(v.active).toBe(true);
    // ended without a logged step (a notebook job without %%train): it is not starting
    expect(describeRun(run({ status: 'succeeded' })).stepText).toBe('no steps logged');
  });

  it('offers Stop only for active background runs not already stopping', () => {
    expect(describeRun(run({ status: 'succeeded' })).canStop).toBe(false);
    expect(describeRun(run({ kind: 'kernel' })).canStop).toBe(false);
    const stopping = describeRun(run({ stop_requested: true }));
    expect(stopping.canStop).toBe(false);
    expect(stopping.statusLabel).toBe('stopping');
  });

  it('shows where a scheduled job runs and why it waits there', () => {
    const queued = describeRun(
      run({ backend: 'slurm', scheduler_id: '12', status: 'queued', queue_reason: 'Resources' })
    );
    expect(queued.kind).toBe('slurm ×2');
    expect(queued.where).toBe('Slurm job 12');
    expect(queued.note).toBe('waiting: Resources');
    expect(queued.detail).toBeNull();
    expect(queued.canStop).toBe(true);
    const local = describeRun(run());
    expect(local.where).toBeNull();
    expect(local.note).toBeNull();
  });

  it('shows the error of a failed run', () => {
    const v = describeRun(
      run({ status: 'failed', error: 'exit code 1' }, { error: 'loss is NaN at step 7' })
    );
    expect(v.detail).toBe('loss is NaN at step 7');
    expect(
      describeRun(run({ status: 'lost', error: 'its process ended without reporting' })).detail
    ).toBe('its process ended without reporting');
  });
});

describe('what tells runs of one name apart', () => {
  it('is the short id and the start time', () => {
    const started = new Date(2026, 0, 1, 14, 2).getTime() / 1000;
    expect(describeRun(run({ id: 'a1b2c3d4e5', started })).meta).toBe('a1b2c3 · 14:02');
  });
});

describe('shortPaths', () => {
  it('cuts absolute paths to their last two parts, keeping what follows them', () => {
    expect(shortPaths('Checkpoint: /home/u/.jiyu/runs/ab/ckpt/step-00000012.pt.')).toBe(
      'Checkpoint: …/ckpt/step-00000012.pt.'
    );
    expect(shortPaths('see /tmp/x and rank 1: a/b')).toBe('see /tmp/x and rank 1: a/b');
  });
});

describe('visibleRuns', () => {
  it('lists active runs first, then the newest finished ones up to the limit', () => {
    const runs = [
      run({ id: 'old', status: 'succeeded', created: 1 }),
      run({ id: 'act', status: 'running', created: 2 }),
      run({ id: 'new', status: 'failed', created: 3 }),
      run({ id: 'mid', status: 'stopped', created: 2.5 })
    ];
    expect(visibleRuns(runs, 2).map(r => r.id)).toEqual(['act', 'new', 'mid']);
    expect(visibleRuns(runs, 0).map(r => r.id)).toEqual(['act']);
  });
});
