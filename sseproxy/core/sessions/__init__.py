"""Pure WebSocket session judges and their drills, one dialect family each, like `core/dialects`."""
