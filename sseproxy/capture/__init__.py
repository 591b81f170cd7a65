"""Capture files: the format, HTTP bodies and WebSocket sessions, written off the event loop."""
