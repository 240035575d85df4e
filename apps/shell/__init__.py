"""The process shell all five binaries share: typed flags with env fallbacks, one logging setup,
one stop-signal setup.

Kept apart from the binaries so that none of them hand-writes flag parsing, logging or signal
handling again: `flags` turns a list of options into a frozen settings value or one
`error: ...` line and exit code 2; `logs` installs the one handler with the documented
verbosity scale; `signals` turns SIGTERM/SIGINT into the event a binary waits on.
"""
