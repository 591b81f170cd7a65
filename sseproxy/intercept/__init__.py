"""Intercept mode: a forward proxy (`CONNECT host:port`) whose named hosts are answered with a
certificate from a local CA and fed to the same handler as the reverse proxy's requests, and
whose other hosts are tunnelled untouched.

- `ca.py`: the CA (made once, kept in the user's data directory) and the leaves per host.
- `destination.py`: what an intercepted connection's TLS context says about where it goes.
- `connect.py`: the `CONNECT` request head, read within bounds (pure).
- `listener.py`: the forward proxy's listener; `tunnel.py`: a host passed through untouched.
- `advice.py`: what `sseproxy ca` prints: the CA and the environment per client family.
"""
