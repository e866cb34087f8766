import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
globalThis.fetch = () => { throw new Error("split: network access is disabled"); };
const quietIO = { stdout: () => {}, stderr: () => {} };
const { loadPyodide } = await import(pathToFileURL(path.join(job.index_dir, "pyodide.mjs")).href);
const script = fs.readFileSync(job.split_script, "utf8");
// split.py imports its helpers from precompile.py as in the repository (buildtools.programs.precompile): that
// package path is written into Pyodide's in-memory file system and put on sys.path.
const helpers = fs.readFileSync(job.script, "utf8");
const helpersRoot = "/tmp/autopilot-build";

async function boot(stdLibURL) {
  const py = await loadPyodide({ indexURL: job.index_dir + path.sep, stdLibURL, ...quietIO });
  py.mountNodeFS(job.mount, job.cache_dir);
  py.FS.mkdirTree(`${helpersRoot}/buildtools/programs`);
  py.FS.writeFile(`${helpersRoot}/buildtools/__init__.py`, "");
  py.FS.writeFile(`${helpersRoot}/buildtools/programs/__init__.py`, "");
  py.FS.writeFile(`${helpersRoot}/buildtools/programs/precompile.py`, helpers);
  py.runPython(`import sys; sys.path.insert(0, ${JSON.stringify(helpersRoot)})`);
  py.runPython(script, { filename: "split.py" });
  return py;
}
const call = (py, fn, arg) => { const f = py.globals.get(fn); try { return f(arg); } finally { f.destroy(); } };

try {
  const py = await boot(job.full_host);
  const res = JSON.parse(call(py, "split_stdlib", JSON.stringify(job.py)));
  for (const dst of [job.core_host, job.rest_host, job.schema_host]) fs.renameSync(dst + ".tmp", dst);
  fs.writeFileSync(job.lists_host + ".tmp", JSON.stringify({ bundle_lazy: res.bundle_lazy }));
  fs.renameSync(job.lists_host + ".tmp", job.lists_host);
  const t0 = performance.now();
  const py2 = await boot(job.core_host);
  res.boot_core_ms = Math.round(performance.now() - t0);
  res.verify = JSON.parse(call(py2, "verify_split", JSON.stringify({ ...job.py, bundle_lazy: res.bundle_lazy })));
  console.log(JSON.stringify(res));
} catch (e) {
  for (const p of [job.core_host, job.rest_host, job.schema_host, job.lists_host]) {
    try { fs.unlinkSync(p); } catch {}
  }
  const lines = String(e && e.message || e).split("\n").map((l) => l.trim()).filter(Boolean);
  console.error(`split error: ${lines[lines.length - 1] || e}`);
  process.exit(1);
}
