/**
 * Parameters typed into the submit dialog, one `name = value` a line, as the JSON object the
 * server injects after the notebook's `parameters` cell. Values are JSON when they parse as
 * JSON (numbers, lists, quoted strings), Python's True/False/None are accepted, anything else
 * is a string: `lr = 3e-4`, `layers = [64, 32]`, `optimizer = adamw`.
 */

export class ParamError extends Error {}

const LINE = /^([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*(.*)$/;
const PYTHON: Record<string, unknown> = { True: true, False: false, None: null };

export function parseParams(text: string): Record<string, unknown> {
  const params: Record<string, unknown> = {};
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) {
      return;
    }
    const match = LINE.exec(line);
    if (!match) {
      throw new ParamError(`Line ${i + 1}: expected "name = value", got "${line}"`);
    }
    params[match[1]] = parseValue(match[2].trim());
  });
  return params;
}

export function parseValue(text: string): unknown {
  if (text in PYTHON) {
    return PYTHON[text];
  }
  try {
    return JSON.parse(text);
  } catch {
    const quoted = /^'(.*)'$/.exec(text);
    return quoted ? quoted[1] : text;
  }
}

/** The whole number of processes per node the dialog asked for, or an error message. */
export function parseNproc(text: string): number {
  const value = Number(text.trim());
  if (!Number.isInteger(value) || value < 1) {
    throw new ParamError(`Processes must be a whole number of at least 1, got "${text}"`);
  }
  return value;
}
