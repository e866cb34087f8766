// Types of static/vendor/socket.io.esm.min.js, which the build copies from socket.io-client (tsconfig.json rootDirs).
export * from "socket.io-client";
