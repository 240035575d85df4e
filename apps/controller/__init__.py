"""App: controller."""
