"""Intercept mode: a forward proxy (`CONNECT host:port`, and plain-HTTP requests in
absolute-form) whose named hosts are answered with a certificate from a local CA (or, for
plain HTTP, as they are) and fed to the same handler as the reverse proxy's requests, and
whose other hosts are tunnelled (or forwarded) untouched, through the egress proxy if any.

- `ca.py`: the CA (made once, kept in the user's data directory) and the leaves per host.
- `destination.py`: where an intercepted connection goes, as its transport says it.
- `connect.py`: the request head, `CONNECT` or absolute-form, read within bounds (pure).
- `listener.py`: the forward proxy's listener; `tunnel.py`: a host passed through untouched;
  `plain.py`: the transport a plain-HTTP intercepted request is handed over on.
- `record.py`: the `connect.finished` record (a record kind of the schema).
- `advice.py`: what `sseproxy ca` prints: the CA and the environment per client family.
"""
