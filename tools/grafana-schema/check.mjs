#!/usr/bin/env node
// Type-checks Grafana dashboard JSON files against Grafana's published schema: the TypeScript types that the
// `@grafana/schema` package generates from Grafana's CUE kinds. Each dashboard is checked as the dashboard kind's
// `Dashboard`, and each panel as the dashboard kind's `Panel` whose `options` and `fieldConfig.defaults.custom` are
// the panel plugin's own `Options` and `FieldConfig` (its panelcfg kind), where the package publishes one.
//
// The JSON goes into a generated TypeScript module as object literals checked with `satisfies` under `strict` and
// `exactOptionalPropertyTypes`: a field the schema does not know (a misspelling), a value of the wrong type, a
// missing required field or a value outside an enum is a compile error, reported with its JSON path. A literal that
// does not match yields at least one error, but the compiler may stop at the first faults it finds in one (a nested
// one hides a missing top-level field): fix what it names and run it again.
//
// usage: node check.mjs DASHBOARD.json [...]   exit 0: all match; 1: some do not (one line per error); 2: usage
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const SCHEMA_PACKAGE = "@grafana/schema";
const schemaManifest = require(`${SCHEMA_PACKAGE}/package.json`);
const schemaRoot = path.dirname(require.resolve(`${SCHEMA_PACKAGE}/package.json`));
const DASHBOARD_MODULE = `${SCHEMA_PACKAGE}/dist/esm/raw/dashboard/x/Dashboard_types.gen`;

// The panel plugins whose options Grafana publishes a kind for: "timeseries" -> its module, and whether that kind
// has a FieldConfig (the panel's fieldConfig.defaults.custom).
function panelKinds() {
  const kinds = new Map();
  const pattern = /^\.\/dist\/esm\/raw\/composable\/([a-z0-9]+)\/panelcfg\/x\/(\w+)_types\.gen$/;
  for (const [subpath, target] of Object.entries(schemaManifest.exports)) {
    const match = pattern.exec(subpath);
    if (!match) continue;
    const declarations = fs.readFileSync(path.join(schemaRoot, target.types), "utf8");
    kinds.set(match[1], {
      module: `${SCHEMA_PACKAGE}${subpath.slice(1)}`,
      fieldConfig: /export interface FieldConfig\b/.test(declarations),
    });
  }
  return kinds;
}

function panelsOf(panels, prefix) {
  const found = [];
  (Array.isArray(panels) ? panels : []).forEach((panel, index) => {
    const at = `${prefix}[${index}]`;
    if (panel && typeof panel === "object" && panel.type !== "row") found.push({ at, panel });
    if (panel && typeof panel === "object" && Array.isArray(panel.panels)) found.push(...panelsOf(panel.panels, `${at}.panels`));
  });
  return found;
}

// One generated module per dashboard: the whole dashboard as a Dashboard, then each panel as its plugin's Panel.
function generate(dashboard, kinds, schemed, unschemed) {
  const lines = [
    `import type * as dashboard from ${JSON.stringify(DASHBOARD_MODULE)};`,
    "type PluginPanel<Options, Custom> = Omit<dashboard.Panel, 'options' | 'fieldConfig'> & {",
    "  options?: Options;",
    "  fieldConfig?: Omit<dashboard.FieldConfigSource, 'defaults'> & {",
    "    defaults: Omit<dashboard.FieldConfig, 'custom'> & { custom?: Custom };",
    "  };",
    "};",
  ];
  const roots = [];
  const used = new Map();
  const literal = (value) => JSON.stringify(value, null, 2);
  roots.push("");
  lines.push(`export const root0 = ${literal(dashboard)} satisfies dashboard.Dashboard;`);
  for (const { at, panel } of panelsOf(dashboard.panels, "panels")) {
    const kind = typeof panel.type === "string" ? kinds.get(panel.type) : undefined;
    if (!kind) {
      unschemed.add(String(panel.type));
      continue;
    }
    if (!used.has(panel.type)) {
      used.set(panel.type, `plugin${used.size}`);
      lines.splice(1, 0, `import type * as ${used.get(panel.type)} from ${JSON.stringify(kind.module)};`);
    }
    const plugin = used.get(panel.type);
    schemed.add(panel.type);
    const custom = kind.fieldConfig ? `${plugin}.FieldConfig` : "dashboard.FieldConfig['custom']";
    lines.push(`export const root${roots.length} = ${literal(panel)} satisfies PluginPanel<${plugin}.Options, ${custom}>;`);
    roots.push(at);
  }
  return { text: lines.join("\n") + "\n", roots };
}

// The package declares each of the kinds' string disjunctions as a TypeScript string enum, which only its own
// members satisfy: as a type alias of the strings (a namespace keeps `Enum.Member` for the declarations that name one),
// "list" is a LegendDisplayMode, as it is in the CUE kind and in the JSON Grafana writes.
const ENUM = /export declare enum (\w+) \{([^}]*)\}/g;
const MEMBER = /(\w+)\s*=\s*("(?:[^"\\]|\\.)*")/g;

const RESERVED = new Set(["any", "bigint", "boolean", "never", "number", "object", "string", "symbol", "undefined", "unknown", "void"]);

function stringEnumsAsValues(text) {
  return text.replace(ENUM, (whole, name, body) => {
    const members = body.replace(/\/\*[\s\S]*?\*\//g, "").split(",").map((m) => m.trim()).filter(Boolean);
    const strings = [...body.matchAll(MEMBER)];
    if (strings.length === 0 || strings.length !== members.length) return whole; // a numeric enum: numbers already fit
    const values = [...new Set(strings.map((m) => m[2]))];
    // (a member named as one of TypeScript's own types, `unknown`, cannot be an alias: no declaration names it)
    const aliases = strings.filter((m) => !RESERVED.has(m[1])).map((m) => `type ${m[1]} = ${m[2]};`).join(" ");
    return `export type ${name} = ${values.join(" | ")};\nexport declare namespace ${name} { ${aliases} }`;
  });
}

// The JSON path of the node a diagnostic points at: property names and array indexes up to the checked literal.
function jsonPath(sourceFile, position, roots) {
  let node = sourceFile;
  for (;;) {
    const child = node.getChildren(sourceFile).find((c) => c.getStart(sourceFile) <= position && position < c.getEnd());
    if (!child) break;
    node = child;
  }
  const parts = [];
  for (let current = node; current; current = current.parent) {
    const parent = current.parent;
    if (!parent) break;
    if (ts.isPropertyAssignment(current)) {
      const name = current.name.text;
      parts.unshift(/^[A-Za-z_$][\w$]*$/.test(name) ? `.${name}` : `[${JSON.stringify(name)}]`);
    } else if (ts.isArrayLiteralExpression(parent)) {
      parts.unshift(`[${parent.elements.indexOf(current)}]`);
    } else if (ts.isVariableDeclaration(current) && /^root\d+$/.test(current.name.text)) {
      const root = roots[Number(current.name.text.slice(4))];
      const joined = root + parts.join("");
      return joined.replace(/^\./, "") || "(the dashboard)";
    }
  }
  return parts.join("").replace(/^\./, "") || "(the dashboard)";
}

function main(files) {
  if (files.length === 0) {
    console.error("usage: node check.mjs DASHBOARD.json [...]");
    return 2;
  }
  const kinds = panelKinds();
  const sources = new Map();
  const origins = new Map();
  const schemed = new Set();
  const unschemed = new Set();
  files.forEach((file, index) => {
    let dashboard;
    try {
      dashboard = JSON.parse(fs.readFileSync(file, "utf8"));
    } catch (err) {
      throw new Error(`${file}: not a dashboard's JSON (${err.message})`);
    }
    const virtual = path.join(HERE, ".generated", `dashboard${index}.ts`);
    const { text, roots } = generate(dashboard, kinds, schemed, unschemed);
    sources.set(virtual, ts.createSourceFile(virtual, text, ts.ScriptTarget.ES2022, true));
    origins.set(virtual, { file, roots });
  });
  const options = {
    strict: true,
    exactOptionalPropertyTypes: true,
    noEmit: true,
    skipLibCheck: false, // the schema's declarations, enums rewritten, must compile too: nothing silently `any`
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ["lib.es2022.d.ts"],
    types: [],
  };
  const host = ts.createCompilerHost(options, true);
  const getSourceFile = host.getSourceFile.bind(host);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => {
    const text = readFile(name);
    return text !== undefined && path.resolve(name).startsWith(schemaRoot + path.sep) ? stringEnumsAsValues(text) : text;
  };
  host.getSourceFile = (name, languageVersion, onError) => {
    const generated = sources.get(path.resolve(name));
    if (generated) return generated;
    const text = host.readFile(name);
    return text === undefined ? getSourceFile(name, languageVersion, onError) : ts.createSourceFile(name, text, languageVersion, true);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => sources.has(path.resolve(name)) || fileExists(name);
  const program = ts.createProgram([...sources.keys()], options, host);
  const diagnostics = ts.getPreEmitDiagnostics(program);
  // A panel is checked twice (in the dashboard, then as its plugin's panel): an error outside its options is
  // reported once, as the dashboard's check words it.
  const errors = new Map();
  for (const diagnostic of diagnostics) {
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, " ");
    const origin = diagnostic.file && origins.get(path.resolve(diagnostic.file.fileName));
    if (!origin) {
      errors.set(`(declarations) ${errors.size}`, `${SCHEMA_PACKAGE} ${schemaManifest.version}: TS${diagnostic.code}: ${message}`);
    } else {
      const at = jsonPath(diagnostic.file, diagnostic.start ?? 0, origin.roots);
      const key = `${origin.file}: ${at}`;
      if (!errors.has(key)) errors.set(key, `${key}: ${message} (TS${diagnostic.code})`);
    }
  }
  for (const line of errors.values()) console.log(line);
  if (errors.size > 0) {
    console.log(`${errors.size} error(s) against ${SCHEMA_PACKAGE} ${schemaManifest.version} (TypeScript ${ts.version})`);
    return 1;
  }
  const note = unschemed.size ? `; no published options schema for panel type(s) ${[...unschemed].sort().join(", ")}` : "";
  console.log(
    `${files.length} dashboard(s) match ${SCHEMA_PACKAGE} ${schemaManifest.version}: Dashboard, and the options of ` +
      `${schemed.size ? [...schemed].sort().join(", ") : "no"} panels (TypeScript ${ts.version}, strict)${note}`,
  );
  return 0;
}

try {
  process.exitCode = main(process.argv.slice(2));
} catch (err) {
  console.error(err.message);
  process.exitCode = 2;
}
