"""`sseproxy run -- COMMAND ...`: the proxy on a free loopback port for the time one command
runs, the command pointed at it through the variables its clients read, and a summary of its
streams and sessions when it ends. `environment` says what the command is given, `proxy`
starts and stops the proxy process, `summary` reads the records back, `command` ties them."""
