// The panel's types of the REST API (every request and reply), generated from its JSON Schema (the Python side's
// `python -m jiyu_magics.server.rest_schema`) by json-schema-to-typescript, formatted with this
// package's prettier settings. Usage: node scripts/api-types.mjs SCHEMA.json OUT.ts
import { readFileSync, writeFileSync } from 'node:fs';
import { compile } from 'json-schema-to-typescript';

const [schemaPath, outPath] = process.argv.slice(2);
const schema = JSON.parse(readFileSync(schemaPath, 'utf8'));
const prettier = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).prettier;
const banner = [
  '/* eslint-disable */',
  '/**',
  " * Every exchange of the jiyu REST API (each route's reply, a submission, a refusal) and its",
  ' * words, generated from its JSON Schema (jiyu_magics/server/rest_schema.py) by',
  ' * json-schema-to-typescript: `make api-types`.',
  ' * Do not edit; tests/test_panel_types.py fails when this file is stale.',
  ' */'
].join('\n');
const ts = await compile(schema, 'JiyuApi', {
  bannerComment: banner,
  additionalProperties: false,
  unreachableDefinitions: true,
  style: prettier
});
writeFileSync(outPath, ts);
