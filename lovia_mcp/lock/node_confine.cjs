'use strict';
// Preloaded (node --require) before a locked npm server's script by lovia-mcp
// (lovia_mcp/lock/packages.py). The lock checks every file of the installed
// entry; Node would still resolve a module the entry lacks (an optional
// dependency, a typo) by walking up to node_modules folders outside it, the
// folders of NODE_PATH and the global ones, none of which the lock covers.
// Here any module that resolves outside the entry is refused as not found,
// for require() (CommonJS) and import (ES modules) alike, so what runs is
// only what was checked.
//
// Caveat: require() is confined by wrapping Module._resolveFilename, which
// Node has kept since its first release but does not document; import by a
// resolve hook (module.register, Node 20.6 and later).

const Module = require('node:module');
const fs = require('node:fs');
const path = require('node:path');

const ROOT_ENV = 'LOVIA_MCP_NODE_ROOT';
const named = process.env[ROOT_ENV];
if (!named) {
  throw new Error(`lovia-mcp: ${ROOT_ENV} names no locked entry; the server is not started`);
}
const root = fs.realpathSync(named) + path.sep;

function outside(request, file) {
  const error = new Error(
    `Cannot find module '${request}' (lovia-mcp: it resolves to ${file}, outside the locked package ${root})`,
  );
  error.code = 'MODULE_NOT_FOUND';
  return error;
}

const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function confined(request, parent, isMain, options) {
  const file = resolveFilename.call(this, request, parent, isMain, options);
  if (path.isAbsolute(file) && !file.startsWith(root)) {
    throw outside(request, file);
  }
  return file;
};

const HOOKS = `
import { fileURLToPath } from 'node:url';
let root = '';
export function initialize(data) { root = data.root; }
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  if (resolved.url.startsWith('file:')) {
    const file = fileURLToPath(resolved.url);
    if (!file.startsWith(root)) {
      const error = new Error("Cannot find module '" + specifier + "' (lovia-mcp: it resolves to " + file +
        ", outside the locked package " + root + ")");
      error.code = 'ERR_MODULE_NOT_FOUND';
      throw error;
    }
  }
  return resolved;
}
`;

if (typeof Module.register !== 'function') {
  throw new Error(
    `lovia-mcp: this Node (${process.version}) cannot confine import to the locked package; ` +
      'the server is not started (use Node 20.6 or later)',
  );
}
Module.register('data:text/javascript,' + encodeURIComponent(HOOKS), { data: { root } });
