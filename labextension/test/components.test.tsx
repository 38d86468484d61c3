import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';

import { GpuSection, PanelBody, RunRow } from '../src/components';
import { run, snapshot } from './records';
import type { Run } from '../src/api.generated';

const noop = (_: Run) => undefined;

function body(props: Partial<React.ComponentProps<typeof PanelBody>>): string {
  return renderToStaticMarkup(
    <PanelBody
      gpus={null}
      runs={null}
      error={null}
      finished={20}
      onStop={noop}
      onLogs={noop}
      {...props}
    />
  );
}

describe('GPU section', () => {
  it('draws one card per device with utilisation and memory meters', () => {
    const html = renderToStaticMarkup(<GpuSection snapshot={snapshot()} />);
    expect(html.match(/class="jp-JiyuGpu"/g)).toHaveLength(2);
    expect(html).toContain('NVIDIA H100 80GB HBM3');
    expect(html).toContain(
      'aria-label="GPU 0 utilisation" aria-valuemin="0" aria-valuemax="100" aria-valuenow="45"'
    );
    expect(html).toContain('12.0 / 80.0 GiB');
    expect(html).toContain('54°C');
    expect(html).toContain('250 / 700 W');
  });

  it('shows n/a for unsupported fields, "hidden" for a device outside CUDA_VISIBLE_DEVICES, and warns at >90% memory', () => {
    const html = renderToStaticMarkup(<GpuSection snapshot={snapshot()} />);
    const t4 = html.slice(html.indexOf('Tesla T4'));
    expect(t4).toContain('hidden');
    expect(t4).toContain(
      'aria-label="GPU 1 utilisation" aria-valuemin="0" aria-valuemax="100" aria-valuetext="n/a"'
    );
    expect(t4).toContain('jp-JiyuMeter-fill jp-mod-warn');
  });

  it('says why no GPU is visible, with the doctor’s finding and fix', () => {
    const html = renderToStaticMarkup(
      <GpuSection
        snapshot={snapshot({
          available: false,
          devices: [],
          reason: 'the NVIDIA driver’s NVML library is not installed',
          doctor: {
            check: 'torch build',
            level: 'problem',
            summary: 'torch 2.13.0+cpu is a CPU-only build.',
            fix: 'Install a CUDA build.'
          }
        })}
      />
    );
    expect(html).toContain('No NVIDIA GPU visible');
    expect(html).toContain('the NVIDIA driver’s NVML library is not installed.');
    expect(html).toContain('torch 2.13.0+cpu is a CPU-only build.');
    expect(html).toContain('Fix: Install a CUDA build.');
  });
});

describe('run rows', () => {
  it('show chip, name, progress, sparkline and both actions for a running job', () => {
    const html = renderToStaticMarkup(
      <RunRow
        run={run(
          {},
          { step: 30, total_steps: 120, loss: 0.5, losses: [2, 1, 0.5], progress: 0.25 }
        )}
        onStop={noop}
        onLogs={noop}
      />
    );
    expect(html).toContain('class="jp-JiyuChip jp-mod-running">running<');
    expect(html).toContain(
      'aria-label="Progress of digits-mlp" aria-valuemin="0" aria-valuemax="100" aria-valuenow="25"'
    );
    expect(html).toMatch(/<polyline points="[\d.,\s]+"/);
    expect(html).toContain('aria-label="Loss over the last 3 logs: from 2 to 0.5"');
    expect(html).toContain('aria-label="Stop digits-mlp"');
    expect(html).toContain('aria-label="Open the log of digits-mlp"');
  });

  it('say which run a resumed run continues, and nothing for a fresh one', () => {
    const resumed = renderToStaticMarkup(
      <RunRow
        run={run({ status: 'succeeded' }, { parent_run: '3fa2c1d0e9', parent_step: 30 })}
        onStop={noop}
        onLogs={noop}
      />
    );
    expect(resumed).toMatch(
      /<span class="jp-JiyuRun-lineage" title="resumed from run 3fa2c1d0e9 at step 30[^"]*">↳ resumed from 3fa2c1 at 30<\/span>/
    );
    const fresh = renderToStaticMarkup(<RunRow run={run()} onStop={noop} onLogs={noop} />);
    expect(fresh).not.toContain('jp-JiyuRun-lineage');
  });

  it('leave out Stop for finished runs and in-kernel runs', () => {
    for (const r of [run({ status: 'succeeded' }), run({ kind: 'kernel' })]) {
      const html = renderToStaticMarkup(<RunRow run={r} onStop={noop} onLogs={noop} />);
      expect(html).not.toContain('Stop digits-mlp');
      expect(html).toContain('Open the log of digits-mlp');
    }
  });

  it('show a deliberate stop as a note with short paths, a failure as an error', () => {
    const line =
      'stopped at step 12 by request; checkpoint /home/u/.jiyu/runs/ab12/ckpt/last.pt; ' +
      'resume with %train --resume /home/u/.jiyu/runs/ab12/ckpt/last.pt --name digits-mlp';
    const stopped = renderToStaticMarkup(
      <RunRow run={run({ status: 'stopped', error: line })} onStop={noop} onLogs={noop} />
    );
    expect(stopped).not.toContain('jp-JiyuRun-detail');
    expect(stopped).toContain(`class="jp-JiyuRun-note" title="${line}"`);
    expect(stopped).toContain(
      'stopped at step 12 by request; checkpoint …/ckpt/last.pt; resume with %train --resume …/ckpt/last.pt --name digits-mlp<'
    );
    const failed = renderToStaticMarkup(
      <RunRow
        run={run({ status: 'failed', error: 'rank 1: ValueError' })}
        onStop={noop}
        onLogs={noop}
      />
    );
    expect(failed).toContain(
      'class="jp-JiyuRun-detail" title="rank 1: ValueError">rank 1: ValueError<'
    );
  });

  it('escape run names (they come from users)', () => {
    const html = renderToStaticMarkup(
      <RunRow run={run({ name: '<img src=x onerror=alert(1)>' })} onStop={noop} onLogs={noop} />
    );
    expect(html).not.toContain('<img');
    expect(html).toContain('&lt;img src=x onerror=alert(1)&gt;');
  });
});

describe('panel body', () => {
  it('has labelled GPU and Run sections and placeholders before the first answer', () => {
    const html = body({});
    expect(html).toContain('aria-labelledby="jp-JiyuPanel-gpus"');
    expect(html).toContain('aria-labelledby="jp-JiyuPanel-runs"');
    expect(html).toContain('Reading GPUs…');
    expect(html).toContain('Reading runs…');
  });

  it('explains how to start when there are no runs, and alerts when the server is unreachable', () => {
    const html = body({ runs: [], gpus: snapshot(), error: 'Network error' });
    expect(html).toContain('No runs yet');
    expect(html).toContain('role="alert"');
    expect(html).toContain('Cannot reach the jiyu server extension: Network error');
  });

  it('lists active runs above finished ones', () => {
    const html = body({
      runs: [
        run({ id: 'f', name: 'finished-run', status: 'succeeded', created: 5 }),
        run({ id: 'a', name: 'active-run', created: 1 })
      ]
    });
    expect(html.indexOf('active-run')).toBeLessThan(html.indexOf('finished-run'));
  });
});
