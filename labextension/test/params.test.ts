import { describe, expect, it } from 'vitest';

import { parseNproc, parseParams, ParamError } from '../src/params';

describe('parseParams', () => {
  it('reads JSON values, Python constants and bare strings', () => {
    expect(
      parseParams('lr = 3e-4\nlayers: [64, 32]\namp = True\nckpt = None\noptimizer = adamw\nname = "a b"\ntag = \'x\'')
    ).toEqual({ lr: 3e-4, layers: [64, 32], amp: true, ckpt: null, optimizer: 'adamw', name: 'a b', tag: 'x' });
  });

  it('ignores blank lines and comments', () => {
    expect(parseParams('\n# learning rate\n  epochs = 3  \n\n')).toEqual({ epochs: 3 });
  });

  it('names the line it cannot read', () => {
    expect(() => parseParams('epochs = 3\n3lr = 1')).toThrow(new ParamError('Line 2: expected "name = value", got "3lr = 1"'));
    expect(() => parseParams('just words')).toThrow(ParamError);
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
