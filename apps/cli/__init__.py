"""App: cli."""
