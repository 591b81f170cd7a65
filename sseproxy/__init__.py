"""sseproxy: a diagnostic reverse proxy for LLM streaming APIs."""

__version__ = "0.1.0"
