"""WebSocket sessions: the handshake, the upstream leg, the two pumps and the session's capture."""
