// Node.js hello-world for `torpor-bench paper`.
const port = Number(process.argv[2] || 8080);
require('http').createServer((req, res) => res.end('hello from node\n')).listen(port);
