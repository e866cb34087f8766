import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const noNetwork = () => { throw new Error("precompile: network access is disabled"); };
globalThis.fetch = noNetwork;
globalThis.XMLHttpRequest = undefined;
globalThis.WebSocket = undefined;
const quietIO = { stdout: () => {}, stderr: () => {} };
const { loadPyodide } = await import(pathToFileURL(path.join(job.index_dir, "pyodide.mjs")).href);
const script = fs.readFileSync(job.script, "utf8");

async function boot(stdLibURL) {
  const t0 = performance.now();
  // No column tables in the .pyc files (tracebacks lose their ^^^ markers): about -20 % of their bytes.
  const opts = { indexURL: job.index_dir + path.sep, env: { PYTHONNODEBUGRANGES: "1" }, ...quietIO };
  if (stdLibURL) opts.stdLibURL = stdLibURL;
  const py = await loadPyodide(opts);
  const ms = performance.now() - t0;
  py.mountNodeFS(job.mount, job.cache_dir);
  py.runPython(script, { filename: "precompile.py" });
  return [py, ms];
}
const call = (py, fn, ...args) => {
  const f = py.globals.get(fn);
  const r = f(...args);
  f.destroy();
  return r && r.toJs ? r.toJs({ dict_converter: Object.fromEntries }) : r;
};

async function main() {
  const out = { targets: {} };
  const vs = job.verify;
  const stdlibStale = job.targets.some((t) => t.name === "stdlib");
  const pycStdlib = path.join(job.cache_dir, vs.stdlib_pyc_rel);
  // Compile in a Pyodide booted on the source stdlib, or on the cached precompiled one
  // when only the bundle is stale (faster, and then that one instance also verifies).
  const [py, bootMs] = await boot(stdlibStale ? null : pycStdlib);
  out.boot_ms = Math.round(bootMs);
  out.targets = JSON.parse(call(py, "run", JSON.stringify(job)));
  for (const t of job.targets) {
    fs.renameSync(path.join(job.cache_dir, t.dst_rel + ".tmp"), path.join(job.cache_dir, t.dst_rel));
  }
  let check = py;
  if (stdlibStale) {
    // Every stdlib module that imports from source must import from the .pyc zip too.
    const srcNames = call(py, "module_names", vs.stdlib_src, py.toPy(vs.skip));
    const srcAll = call(py, "import_all", py.toPy(srcNames));
    const [py2, boot2] = await boot(pycStdlib);
    out.boot_pyc_ms = Math.round(boot2);
    check = py2;
    const names = call(py2, "module_names", vs.stdlib_pyc, py2.toPy(vs.skip));
    const pycAll = call(py2, "import_all", py2.toPy(names));
    const lost = srcAll.ok.filter((n) => !pycAll.ok.includes(n));
    out.import_all = { modules: names.length, ok: pycAll.ok.length };
    const why = lost.map((n) => n + " (" + pycAll.bad[n] + ")").join(", ");
    if (lost.length) throw new Error(`modules import from source but not from .pyc: ${why}`);
  }
  const origins = call(check, "origins", check.toPy(vs.stdlib_modules));
  const notPyc = Object.entries(origins).filter(([, o]) => !(o && o.endsWith(".pyc")));
  if (notPyc.length) throw new Error(`stdlib modules not loaded from .pyc: ${JSON.stringify(notPyc)}`);
  const bundle = `${job.mount}/${vs.bundle_pyc_rel}`;
  check.runPython(`import sys; sys.path.insert(0, ${JSON.stringify(bundle)})`);
  const bo = call(check, "origins", check.toPy(vs.bundle_modules));
  const bad = Object.entries(bo).filter(([, o]) => !(o && o.startsWith(bundle) && o.endsWith(".pyc")));
  if (bad.length) throw new Error(`bundle modules not loaded from bundle.zip as .pyc: ${JSON.stringify(bad)}`);
  call(check, "smoke_bundle");
  return out;
}

try {
  console.log(JSON.stringify(await main()));
} catch (e) {
  const lines = String(e && e.message || e).split("\n").map((l) => l.trim()).filter(Boolean);
  console.error(`precompile error: ${lines[lines.length - 1] || e}`);
  process.exit(1);
}
