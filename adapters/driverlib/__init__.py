"""The NVIDIA driver's C libraries (NVML, Fabric Manager's libnvfm), each loaded only in a
child process: where a driver root keeps them, the environment such a child gets, and one
bounded run of it. Generic: it knows no library's API, and no other adapter (the adapters
that bind one, `adapters.nvml` and `adapters.fabricmanager`, both build on it).
"""
