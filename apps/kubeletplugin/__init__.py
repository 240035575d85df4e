"""App: kubeletplugin."""
