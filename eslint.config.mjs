// eslint for the browser-side JS (bash dev lint): the recommended rules, no exceptions.
import js from "@eslint/js";
import globals from "globals";

export default [
  { ignores: ["widget/_dist/**", "node_modules/**", ".build-cache/**", "build/**", "dist/**", "static/demo/**", "bench/**", "buildtools/programs/**", "tests/**"] },
  js.configs.recommended,
  {
    files: ["static/**/*.js", "static/**/*.mjs"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: { ...globals.browser },
    },
  },
  {
    files: ["static/prewarm-worker.js"],
    languageOptions: { globals: { ...globals.worker } },
  },
  {
    files: ["eslint.config.mjs"],
    languageOptions: { globals: { ...globals.node } },
  },
];
