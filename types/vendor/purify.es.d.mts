// Types of static/vendor/purify.es.mjs, which the build copies from the dompurify package (tsconfig.json rootDirs).
export * from "dompurify";
export { default } from "dompurify";
