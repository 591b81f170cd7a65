// A Node client through an HTTPS proxy with nothing but the environment: the proxy's CA from
// NODE_EXTRA_CA_CERTS (no `ca` option), ALPN offered as Node clients offer it (h2 first).
// Node before 22.21 has no NODE_USE_ENV_PROXY, so the CONNECT is made here, as proxy agents do.
// Prints {status, alpn, body} as JSON.
"use strict";
const http = require("http");
const https = require("https");
const tls = require("tls");

const [proxyHost, proxyPort] = process.env.PROXY_ADDRESS.split(":");
const target = process.env.TARGET; // host:port
const [host, port] = target.split(":");
const connect = http.request({ host: proxyHost, port: Number(proxyPort), method: "CONNECT", path: target });
connect.on("connect", (res, socket) => {
  if (res.statusCode !== 200) {
    console.error(`CONNECT answered ${res.statusCode}`);
    process.exit(2);
  }
  const body = JSON.stringify({ model: process.env.MODEL, stream: true, messages: [{ role: "user", content: "hi" }] });
  let secure;
  const request = https.request(
    {
      host, port: Number(port), method: "POST", path: "/v1/chat/completions",
      headers: { "content-type": "application/json", authorization: "Bearer sk-test", "content-length": Buffer.byteLength(body) },
      createConnection: () => (secure = tls.connect({ socket, servername: host, ALPNProtocols: ["h2", "http/1.1"] })),
    },
    (response) => {
      let data = "";
      response.setEncoding("utf8");
      response.on("data", (chunk) => (data += chunk));
      response.on("end", () => {
        process.stdout.write(JSON.stringify({ status: response.statusCode, alpn: secure.alpnProtocol, body: data }));
        process.exit(0);
      });
    },
  );
  request.on("error", (err) => { console.error(String(err)); process.exit(3); });
  request.end(body);
});
connect.on("error", (err) => { console.error(String(err)); process.exit(4); });
connect.end();
