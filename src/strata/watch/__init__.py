"""The watcher: the change monitor, its server, and what it serves the command line."""
