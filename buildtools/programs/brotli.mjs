import fs from "node:fs";
import zlib from "node:zlib";
import { promisify } from "node:util";
const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const compress = promisify(zlib.brotliCompress);
await Promise.all(job.files.map(async ([src, dst, quality]) => {
  const data = fs.readFileSync(src);
  const out = await compress(data, { params: {
    [zlib.constants.BROTLI_PARAM_QUALITY]: quality, [zlib.constants.BROTLI_PARAM_LGWIN]: 24,
    [zlib.constants.BROTLI_PARAM_SIZE_HINT]: data.length } });
  fs.writeFileSync(dst + ".tmp", out);
  fs.renameSync(dst + ".tmp", dst);
}));
console.log(JSON.stringify({ n: job.files.length }));
