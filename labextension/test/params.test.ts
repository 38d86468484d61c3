import { describe, expect, it } from 'vitest';

import { paramLines, parseNproc, ParamError, toSubmission } from '../src/params';

describe('paramLines', () => {
  it('sends the lines as typed, numbered as the user sees them', () => {
    expect(paramLines('lr = 3e-4\n\n# model\nlayers: [64, 32]\r\narch = resnet')).toEqual([
      'lr = 3e-4',
      '',
      '# model',
      'layers: [64, 32]',
      'arch = resnet'
    ]);
  });

  it('sends nothing for an empty box', () => {
    expect(paramLines('  \n ')).toEqual([]);
  });
});

describe('toSubmission', () => {
  it('carries the raw parameter lines, not values parsed in the browser', () => {
    expect(
      toSubmission('dir/train.ipynb', { nproc: '2', name: ' exp ', params: 'lr = 3e-4\nn = 600' })
    ).toEqual({
      notebook: 'dir/train.ipynb',
      nproc: 2,
      param_lines: ['lr = 3e-4', 'n = 600'],
      name: 'exp'
    });
  });
});

describe('parseNproc', () => {
  it('accepts whole numbers from 1', () => {
    expect(parseNproc(' 4 ')).toBe(4);
    expect(() => parseNproc('0')).toThrow(ParamError);
    expect(() => parseNproc('1.5')).toThrow(ParamError);
    expect(() => parseNproc('two')).toThrow(ParamError);
  });
});

import { parameterNames } from '../src/params';

describe('the parameters cell', () => {
  it('names what it assigns, once each, not comparisons or indented lines', () => {
    expect(
      parameterNames('lr = 3e-4\nepochs: int = 5\nif lr == 1:\n    x = 2\nlr = 1e-3\n# n = 3')
    ).toEqual(['lr', 'epochs']);
  });
});
