import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
globalThis.fetch = () => { throw new Error("snapshot: network access is disabled"); };
const quietIO = { stdout: () => {}, stderr: () => {} };
const { loadPyodide } = await import(pathToFileURL(path.join(job.index_dir, "pyodide.mjs")).href);
const opts = { indexURL: job.index_dir + path.sep, stdLibURL: job.core, ...quietIO,
               lockFileContents: { info: job.lock_info, packages: {} } };
const bundle = fs.readFileSync(job.bundle);
function installBundle(py) {
  py.FS.mkdirTree(path.posix.dirname(job.bundle_fs));
  py.FS.writeFile(job.bundle_fs, bundle);
}
try {
  let t0 = performance.now();
  const py = await loadPyodide({ ...opts, _makeSnapshot: true });
  installBundle(py);
  // What the page's boot imports, before any JS object is touched (a live JS proxy makes the snapshot fail):
  // the deps and the widget's modules, not the DOM parts (those run at boot, after the restore).
  py.runPython(job.prepare, { filename: "snapshot_prepare.py" });
  const snap = py.makeMemorySnapshot();
  const makeMs = performance.now() - t0;
  fs.writeFileSync(job.out + ".tmp", snap);
  t0 = performance.now();
  const py2 = await loadPyodide({ ...opts, _loadSnapshot: fs.readFileSync(job.out + ".tmp") });
  const restoreMs = performance.now() - t0;
  installBundle(py2);
  const check = JSON.parse(py2.runPython(job.check));
  fs.renameSync(job.out + ".tmp", job.out);
  console.log(JSON.stringify({ bytes: snap.length, make_ms: Math.round(makeMs),
                               restore_ms: Math.round(restoreMs), ...check }));
} catch (e) {
  const lines = String(e && e.message || e).split("\n").map((l) => l.trim()).filter(Boolean);
  console.error(`snapshot error: ${lines[lines.length - 1] || e}`);
  process.exit(1);
}
