"""sseproxy: a diagnostic reverse proxy for LLM streaming APIs.

The layout, one folder per layer or feature (each package's docstring says more):

- `core/`: the pure analysis, bytes in and a verdict out; no I/O, clock or logging.
  `core/dialects/` holds one module per HTTP API dialect, `core/sessions/` one per WebSocket
  session dialect family (its judge) and their drills.
- `shell/`: the aiohttp server around the core: admission, the upstream leg (`upstream/`),
  the relay, the record and its sinks; `shell/websocket/` the handshake, the upstream leg and
  the pumps of a WebSocket session.
- `observe/`: the log and its writer thread, redaction, metrics, tracing, the record schema.
- `capture/`: capture files (the format, HTTP bodies, WebSocket sessions), written off the loop.
- `inspector/`: the live page's endpoints, its event list and session rows.
- `tools/`: the offline commands on the core and capture (replay, mock, demo, report).
- `cli.py` parses the command line (commands imported lazily), `cli_io.py` is what it shares
  with the tools, `config.py` the settings, `target.py` the request target, `server.py` runs
  the server.

`tests/unit/test_package_layers.py` holds the rules: no import cycle, the core imports
nothing above it, observability no server code, nobody imports the tools or the CLI.
"""

__version__ = "0.1.0"
